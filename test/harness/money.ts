import type { AdminClient, UsageRecordView } from '../../sidecar/cli/admin-client.js';
import type { Config } from '../../sidecar/src/config/schema.js';
import { admitBody } from '../../sidecar/src/domain/admission.js';
import { worstCase } from '../../sidecar/src/domain/billing/pricing.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';

/** The credit hold the gateway places for a chat body (the same pure functions the sidecar runs). */
export function holdFor(config: Config, body: unknown): number {
  const catalog = new Catalog(config.models, config.brand);
  const a = admitBody('chat', 'POST', Buffer.from(JSON.stringify(body)), {
    catalog,
    defaultTemperature: config.defaults.temperature,
    maxEmbeddingInputs: config.limits.maxEmbeddingInputs,
    maxRequestBytes: config.limits.maxRequestBytes,
  });
  if (!a.ok) throw new Error('test body refused');
  return worstCase(config.billing.prices[a.ctx.resolved.internalModel]!, a.ctx, a.ctx.promptBytes, a.ctx.messageCount).cost;
}

/** A tenant's books as the operator API shows them: what reconciliation needs. */
export interface Books {
  readonly balance: number;
  readonly held: number;
  /** Set aside in credit leases (given back when the tenant is idle; reaped after a crash). */
  readonly leased: number;
  /** Sum of grants minus deducts (ledger entries). */
  readonly granted: number;
  /** Sum of charges in the ledger (positive). */
  readonly charged: number;
  /** Sum of the usage records' costs. */
  readonly usageCost: number;
  /** Request ids in the usage counter. */
  readonly usageIds: ReadonlySet<string>;
  readonly usage: ReadonlyArray<UsageRecordView>;
}

export async function books(admin: AdminClient, tenantId: string): Promise<Books> {
  const [a, ledger, usage] = await Promise.all([admin.account(tenantId), admin.ledger(tenantId, 10_000), admin.usageRecords(tenantId, 10_000)]);
  const sum = (type: string) => ledger.data.filter((e) => e.type === type).reduce((s, e) => s + e.amount, 0);
  return {
    balance: a.balance,
    held: a.held,
    leased: a.leased,
    granted: sum('grant') + sum('deduct'),
    charged: -sum('charge'),
    usageCost: usage.data.reduce((s, r) => s + r.cost, 0),
    usageIds: new Set(usage.data.map((r) => r.requestId)),
    usage: usage.data,
  };
}

/** Polls until no hold is open and no credit is set aside in a lease; returns the books then, or throws with the last state after `timeoutMs`. */
export async function untilNothingHeld(admin: AdminClient, tenantId: string, timeoutMs: number): Promise<Books> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    let b: Books | null = null;
    try {
      b = await books(admin, tenantId);
      if (b.held === 0 && b.leased === 0) return b;
    } catch {
      // the operator API is restarting
    }
    if (Date.now() > until) throw new Error(`holds still open after ${timeoutMs} ms: ${JSON.stringify(b && { balance: b.balance, held: b.held, leased: b.leased })}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The money invariant: opening + grants − closing = the charges = the usage counter's costs, to the micro-unit. */
export function reconciles(b: Books, opening = 0): { ok: boolean; detail: string } {
  const spent = opening + b.granted - b.balance;
  const ok = spent === b.charged && b.charged === b.usageCost && b.held === 0 && b.leased === 0;
  return { ok, detail: `opening ${opening} + grants ${b.granted} - closing ${b.balance} = ${spent}; charges ${b.charged}; usage ${b.usageCost}; held ${b.held}; leased ${b.leased}` };
}
