import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { AccountStore } from '../src/store/account-contract.js';
import type { Ledger } from '../src/store/ledger-contract.js';
import type { AutoTopupTrigger } from '../src/store/auto-topup-trigger.js';
import { PaymentUnavailableError, type PaymentProvider } from './payments/provider.js';

export interface AutoTopupDeps {
  readonly ledger: Ledger;
  readonly accounts: AccountStore;
  readonly trigger: AutoTopupTrigger;
  readonly payments: PaymentProvider | null;
  readonly currency: string;
  readonly log: Logger;
  readonly now?: () => number;
}

/** Transient provider failures are retried this often (same idempotency key, so never charged twice). */
const ATTEMPTS = 3;

/**
 * Auto top-up, run by the sidecar after each settlement: when the trigger
 * says this settlement crossed the threshold, the saved card is charged the
 * configured amount and the ledger credited (idempotent by the provider's
 * charge id). A declined card switches auto top-up off and records why, which
 * GET /v1/credits shows; a provider that stays unreachable leaves it on and
 * re-armed, so the next settlement tries again.
 */
export class AutoTopupRunner {
  constructor(private readonly deps: AutoTopupDeps) {}

  async afterSettlement(tenantId: string): Promise<void> {
    if (!(await this.deps.trigger.check(tenantId))) return;
    await this.fire(tenantId);
  }

  private async fire(tenantId: string): Promise<void> {
    const { accounts, payments, log } = this.deps;
    const now = this.deps.now ?? Date.now;
    const [settings, card] = await Promise.all([accounts.getAutoTopup(tenantId), accounts.getCard(tenantId)]);
    if (!settings?.enabled || !card || !payments) return;
    const idempotencyKey = `auto_topup:${tenantId}:${randomUUID()}`;
    for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
      let r;
      try {
        r = await payments.charge({ token: card.token, amount: settings.amount, currency: this.deps.currency, idempotencyKey, description: 'auto top-up' });
      } catch (err) {
        if (!(err instanceof PaymentUnavailableError)) throw err;
        r = { status: 'failed' as const };
      }
      if (r.status === 'succeeded') {
        const entry = await this.deps.ledger.adjustBalance(tenantId, settings.amount, `auto_topup:${r.chargeId}`, 'auto_topup', now());
        log.info({ tenant_id: tenantId, amount: settings.amount, entry_id: entry.id }, 'auto top-up charged');
        return;
      }
      if (r.status === 'declined') {
        await accounts.setAutoTopup(tenantId, { ...settings, enabled: false, disabledReason: r.reason, updatedAt: new Date(now()).toISOString() });
        await this.deps.trigger.arm(tenantId, null);
        log.warn({ tenant_id: tenantId, reason: r.reason }, 'auto top-up declined; switched off');
        return;
      }
    }
    await this.deps.trigger.arm(tenantId, settings.threshold);
    log.warn({ tenant_id: tenantId }, 'auto top-up: payment provider unavailable; will try at the next settlement');
  }
}
