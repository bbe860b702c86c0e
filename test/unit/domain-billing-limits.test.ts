/** The billing service's answers beyond the balance: throttling per key or tenant, the spend cap, prices across a reload, what it reports. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import type { Config } from '../../sidecar/src/config/schema.js';
import { admitBody } from '../../sidecar/src/domain/admission.js';
import type { Principal } from '../../sidecar/src/domain/auth/principal.js';
import { SettlementJournal } from '../../sidecar/src/domain/billing/journal.js';
import { costOf } from '../../sidecar/src/domain/billing/pricing.js';
import { Billing, type BillingEvents } from '../../sidecar/src/domain/billing/service.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { StoreUnavailableError } from '../../sidecar/src/store/contract.js';
import type { Ledger } from '../../sidecar/src/store/ledger-contract.js';
import { createMemoryLedger } from '../../sidecar/src/store/memory-ledger.js';

const base = defaultConfig('svc') as Record<string, any>;
const configWith = (billing: Record<string, unknown>): Config => parseConfig({ ...base, billing: { ...base.billing, creditCheck: true, creditLease: { enabled: false }, ...billing } });
const cfg = configWith({});
const catalog = new Catalog(cfg.models, 'svc');
const policy = { catalog, defaultTemperature: 0.7, maxEmbeddingInputs: 256, maxRequestBytes: 1 << 20 };
const ctxOf = (maxTokens = 100, cat = catalog) => {
  const a = admitBody('chat', 'POST', Buffer.from(JSON.stringify({ model: 'svc-core', max_tokens: maxTokens, messages: [{ role: 'user', content: 'hi' }] })), { ...policy, catalog: cat });
  if (!a.ok) throw new Error('refused');
  return a.ctx;
};
const keyOf = (keyId: string | null, tenantId = 'ten_1'): Principal => ({ subjectId: keyId ?? 'usr_1', tenantId, method: 'api_key', scopes: ['ai'], keyId, role: null });
const dir = mkdtempSync(join(tmpdir(), 'billing-limits-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const journal = () => new SettlementJournal(join(dir, `journal-${n++}.jsonl`));
const PERIOD = (t: number) => new Date(t).toISOString().slice(0, 7);

function recorder() {
  const failed: string[] = [];
  const ops: string[] = [];
  const events: BillingEvents = { settled: () => {}, failed: (what) => failed.push(what), operation: (op, result) => ops.push(`${op}:${result}`) };
  return { events, failed, ops };
}

async function funded(ledger: Ledger, tenant = 'ten_1', amount = 1_000_000_000): Promise<Ledger> {
  await ledger.adjustBalance(tenant, amount, `grant-${tenant}`, 'grant', Date.now());
  return ledger;
}

describe('throttling', () => {
  // 12:00:15 UTC: 45 s left in the minute.
  const now = Date.UTC(2026, 10, 24, 12, 0, 15);
  const clock = () => now;

  it('per key: each key of a tenant has its own count; 429 with the seconds left in the minute', async () => {
    const ledger = await funded(createMemoryLedger());
    const billing = new Billing(ledger, configWith({ rateLimits: { requestsPerMinute: 1, per: 'key' } }).billing, journal(), recorder().events, clock);
    expect((await billing.admit(keyOf('key_a'), ctxOf(), 'r1')).ok).toBe(true);
    expect((await billing.admit(keyOf('key_b'), ctxOf(), 'r2')).ok).toBe(true);
    const refused = await billing.admit(keyOf('key_a'), ctxOf(), 'r3');
    expect(refused).toMatchObject({ ok: false, retryAfter: 45 });
    if (!refused.ok) expect(refused.error.entry.code).toBe('rate_limit_exceeded');
  });

  it('per tenant: the keys of a tenant share one count (and a session without a key counts for its tenant)', async () => {
    const ledger = await funded(createMemoryLedger());
    const billing = new Billing(ledger, configWith({ rateLimits: { requestsPerMinute: 1, per: 'tenant' } }).billing, journal(), recorder().events, clock);
    expect((await billing.admit(keyOf('key_a'), ctxOf(), 'r1')).ok).toBe(true);
    expect((await billing.admit(keyOf('key_b'), ctxOf(), 'r2')).ok).toBe(false);
    expect((await billing.admit(keyOf(null), ctxOf(), 'r3')).ok).toBe(false);
  });

  it('per key, a caller without a key (a session) is counted for its tenant', async () => {
    const ledger = await funded(createMemoryLedger());
    const billing = new Billing(ledger, configWith({ rateLimits: { requestsPerMinute: 1, per: 'key' } }).billing, journal(), recorder().events, clock);
    expect((await billing.admit(keyOf(null), ctxOf(), 'r1')).ok).toBe(true);
    expect((await billing.admit(keyOf(null), ctxOf(), 'r2')).ok).toBe(false);
    expect((await billing.admit(keyOf('key_a'), ctxOf(), 'r3')).ok).toBe(true);
  });
});

describe('the spend cap', () => {
  it('reached: 429 spend_cap_exceeded; only this request does not fit: the answer says what remains, from cap - spent - held', async () => {
    const now = Date.now();
    const ledger = await funded(createMemoryLedger());
    const billing = new Billing(ledger, cfg.billing, journal(), recorder().events);
    const small = ctxOf(10);
    const first = await billing.admit(keyOf('key_a'), small, 'r1');
    expect(first.ok).toBe(true);
    const heldOne = (await ledger.account('ten_1', PERIOD(now))).held;
    // A cap that leaves exactly one more small request's worth after the open hold.
    await ledger.setCap('ten_1', heldOne * 2);
    expect((await billing.admit(keyOf('key_a'), small, 'r2')).ok).toBe(true);
    const reached = await billing.admit(keyOf('key_a'), small, 'r3');
    expect(reached.ok).toBe(false);
    if (!reached.ok) expect(reached.error.entry.code).toBe('spend_cap_exceeded');
    // Room for a small request but not for a large one: not "reached"; the message names what remains.
    await ledger.setCap('ten_1', heldOne * 3);
    const large = await billing.admit(keyOf('key_a'), ctxOf(100_000), 'r4');
    expect(large.ok).toBe(false);
    if (!large.ok) {
      expect(large.error.entry.status).toBe(400);
      expect(large.error.message).toContain(`Only ${heldOne} micro-units`); // 3 x one hold, minus the two open
    }
  });

  it('a cap cleared in between: the plain answer; the store unreachable for the detail: the plain answer too', async () => {
    const ledger = await funded(createMemoryLedger());
    await ledger.setCap('ten_1', 1);
    let clearBeforeDetail = true;
    const flaky: Ledger = {
      ...ledger,
      reserve: (i) => ledger.reserve(i),
      account: async (t, p) => {
        if (clearBeforeDetail) {
          await ledger.setCap('ten_1', null);
          return ledger.account(t, p);
        }
        throw new StoreUnavailableError(new Error('down'));
      },
    };
    const billing = new Billing(flaky, cfg.billing, journal(), recorder().events);
    const cleared = await billing.admit(keyOf('key_a'), ctxOf(100_000), 'r1');
    expect(!cleared.ok && cleared.error.entry.code).toBe('spend_cap_exceeded');
    await ledger.setCap('ten_1', 1);
    clearBeforeDetail = false;
    const noDetail = await billing.admit(keyOf('key_a'), ctxOf(100_000), 'r2');
    expect(!noDetail.ok && noDetail.error.entry.code).toBe('spend_cap_exceeded');
  });
});

describe('prices across a reload', () => {
  it('a request admitted before the reload is settled at the price it was held at; a new one at the new price', async () => {
    const ledger = await funded(createMemoryLedger());
    const billing = new Billing(ledger, cfg.billing, journal(), recorder().events);
    billing.reconfigure(cfg.billing, catalog.all()); // as at start: the catalogue's prices
    const before = ctxOf(1000);
    expect((await billing.admit(keyOf('key_a'), before, 'old')).ok).toBe(true);
    billing.claim('ten_1', 'old');
    const internal = before.resolved.internalModel;
    const oldPrice = cfg.billing.prices[internal]!;
    const dearer = configWith({ prices: { ...base.billing.prices, [internal]: { inputPerMillion: oldPrice.inputPerMillion * 10, outputPerMillion: oldPrice.outputPerMillion * 10 } } });
    const newCatalog = new Catalog(dearer.models, 'svc');
    billing.reconfigure(dearer.billing, newCatalog.all()); // the reload: the new catalogue and its prices
    const usage = { promptTokens: 20, completionTokens: 500, totalTokens: 520, estimated: false }; // within what was held
    const start = (await ledger.account('ten_1', PERIOD(Date.now()))).balance;
    await billing.finish({ principal: keyOf('key_a'), ctx: before, requestId: 'old', usage, startedAt: Date.now() });
    const afterOld = (await ledger.account('ten_1', PERIOD(Date.now()))).balance;
    expect(start - afterOld).toBe(costOf(oldPrice, usage, 1));
    const after = ctxOf(1000, newCatalog);
    expect((await billing.admit(keyOf('key_a'), after, 'new')).ok).toBe(true);
    billing.claim('ten_1', 'new');
    await billing.finish({ principal: keyOf('key_a'), ctx: after, requestId: 'new', usage, startedAt: Date.now() });
    const afterNew = (await ledger.account('ten_1', PERIOD(Date.now()))).balance;
    expect(afterOld - afterNew).toBe(costOf(dearer.billing.prices[internal]!, usage, 1));
  });
});

describe('what the service reports', () => {
  it('a claim the store refuses, and a lease renewal that fails, are reported, never thrown', async () => {
    const ledger = await funded(createMemoryLedger());
    const broken: Ledger = {
      ...ledger,
      claim: async () => {
        throw new StoreUnavailableError(new Error('down'));
      },
      renewLeases: async () => {
        throw new StoreUnavailableError(new Error('down'));
      },
    };
    const rec = recorder();
    const billing = new Billing(broken, cfg.billing, journal(), rec.events);
    expect(billing.claim('ten_1', 'placed-elsewhere')).toBe(false);
    await new Promise((r) => setTimeout(r, 10));
    expect(rec.failed).toContain('claim');
    expect(await billing.renewLeases()).toBe(0);
    expect(rec.failed).toContain('renew');
  });

  it('each settlement or release says how it went: applied, journaled, retried, or failed', async () => {
    const ledger = await funded(createMemoryLedger());
    let down = true;
    const flaky: Ledger = {
      ...ledger,
      settle: async (i) => {
        if (down) throw new StoreUnavailableError(new Error('down'));
        return ledger.settle(i);
      },
      release: async (t, r) => {
        if (r === 'refused') throw new TypeError('not a request id this ledger takes');
        return ledger.release(t, r);
      },
    };
    const rec = recorder();
    const billing = new Billing(flaky, cfg.billing, journal(), rec.events);
    const usage = { promptTokens: 5, completionTokens: 5, totalTokens: 10, estimated: false };
    await billing.admit(keyOf('key_a'), ctxOf(10), 'r1');
    billing.claim('ten_1', 'r1');
    await billing.finish({ principal: keyOf('key_a'), ctx: ctxOf(10), requestId: 'r1', usage, startedAt: Date.now() });
    expect(rec.ops).toEqual(['settle:journaled']);
    down = false;
    expect(await billing.retryPending()).toBe(0);
    expect(rec.ops).toEqual(['settle:journaled', 'settle:retried']);
    await billing.finish({ principal: keyOf('key_a'), ctx: null, requestId: 'refused', usage: null, startedAt: Date.now() });
    expect(rec.ops.at(-1)).toBe('release:failed');
    expect(rec.failed).toContain('release');
    await billing.finish({ principal: keyOf('key_a'), ctx: null, requestId: 'r-none', usage: null, startedAt: Date.now() });
    expect(rec.ops.at(-1)).toBe('release:applied');
  });

  it('settled() resolves only once every settlement under way is written', async () => {
    const ledger = await funded(createMemoryLedger());
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    const slow: Ledger = { ...ledger, settle: async (i) => (await gate, ledger.settle(i)) };
    const billing = new Billing(slow, cfg.billing, journal(), recorder().events);
    await billing.admit(keyOf('key_a'), ctxOf(10), 'r1');
    billing.claim('ten_1', 'r1');
    void billing.finish({ principal: keyOf('key_a'), ctx: ctxOf(10), requestId: 'r1', usage: { promptTokens: 1, completionTokens: 1, totalTokens: 2, estimated: false }, startedAt: Date.now() });
    let done = false;
    const waiting = billing.settled().then(() => (done = true));
    await new Promise((r) => setTimeout(r, 20));
    expect(done).toBe(false);
    expect(billing.inFlight.finishing).toBe(1);
    open();
    await waiting;
    expect(done).toBe(true);
    expect((await ledger.account('ten_1', PERIOD(Date.now()))).held).toBe(0);
  });
});

describe('counts and events', () => {
  it('renewLeases and reap return how many holds they touched, every tenant and every hold counted', async () => {
    let t = Date.now();
    const ledger = await funded(await funded(createMemoryLedger()), 'ten_2');
    const billing = new Billing(ledger, cfg.billing, journal(), recorder().events, () => t, 'inst-a');
    for (const [rid, tenant] of [['a1', 'ten_1'], ['a2', 'ten_1'], ['b1', 'ten_2']] as const) {
      expect((await billing.admit(keyOf('key_a', tenant), ctxOf(10), rid)).ok).toBe(true);
      billing.claim(tenant, rid);
    }
    expect(await billing.renewLeases()).toBe(3);
    // Another instance, after every lease ran out (this one died): it releases all three.
    t += (cfg.billing.holdLeaseSeconds + 1) * 1000;
    const reaper = new Billing(ledger, cfg.billing, journal(), recorder().events, () => t, 'inst-b');
    expect(await reaper.reap()).toBe(3);
    expect((await ledger.account('ten_1', PERIOD(t))).held).toBe(0);
    expect(await reaper.reap()).toBe(0);
  });

  it('a settlement reports what was charged; a replayed admission opens no second hold', async () => {
    const ledger = await funded(createMemoryLedger());
    const settled: unknown[] = [];
    const opened: number[] = [];
    const billing = new Billing(ledger, cfg.billing, journal(), { settled: (i) => settled.push(i), failed: () => {}, holdOpened: (a) => opened.push(a) });
    const first = await billing.admit(keyOf('key_a'), ctxOf(10), 'r1');
    const again = await billing.admit(keyOf('key_a'), ctxOf(10), 'r1');
    expect(first.ok && again.ok).toBe(true);
    expect(opened).toHaveLength(1);
    expect(billing.inFlight.holds).toBe(1);
    billing.claim('ten_1', 'r1');
    const usage = { promptTokens: 4, completionTokens: 6, totalTokens: 10, estimated: true };
    await billing.finish({ principal: keyOf('key_a'), ctx: ctxOf(10), requestId: 'r1', usage, startedAt: Date.now() });
    expect(settled).toEqual([{ requestId: 'r1', charged: costOf(cfg.billing.prices['sim-core-1']!, usage, 1), uncovered: 0, estimated: true }]);
    expect(billing.inFlight.holds).toBe(0);
  });

  it('a request with a priced body but no usage (nothing delivered) is released, not settled', async () => {
    const ledger = await funded(createMemoryLedger());
    const rec = recorder();
    const billing = new Billing(ledger, cfg.billing, journal(), rec.events);
    await billing.admit(keyOf('key_a'), ctxOf(10), 'r1');
    billing.claim('ten_1', 'r1');
    await billing.finish({ principal: keyOf('key_a'), ctx: ctxOf(10), requestId: 'r1', usage: null, startedAt: Date.now() });
    expect(rec.ops).toEqual(['release:applied']);
    const a = await ledger.account('ten_1', PERIOD(Date.now()));
    expect(a.held).toBe(0);
    expect(a.spent).toBe(0);
  });

  it('the cap detail counts what was already spent this period', async () => {
    const ledger = await funded(createMemoryLedger());
    const billing = new Billing(ledger, cfg.billing, journal(), recorder().events);
    await billing.admit(keyOf('key_a'), ctxOf(10), 'spent');
    billing.claim('ten_1', 'spent');
    await billing.finish({ principal: keyOf('key_a'), ctx: ctxOf(10), requestId: 'spent', usage: { promptTokens: 10, completionTokens: 10, totalTokens: 20, estimated: false }, startedAt: Date.now() });
    const spent = (await ledger.account('ten_1', PERIOD(Date.now()))).spent;
    expect(spent).toBeGreaterThan(0);
    await ledger.setCap('ten_1', spent + 100);
    const o = await billing.admit(keyOf('key_a'), ctxOf(100_000), 'big');
    expect(o.ok).toBe(false);
    if (!o.ok) expect(o.error.message).toContain('Only 100 micro-units');
  });
});

describe('timing and concurrency guards', () => {
  it('an unclaimed hold is kept for the claim grace period, not released at once', async () => {
    // The grace timer on a clock the test moves: a stalled box cannot run a wall-clock second out.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    try {
      const ledger = await funded(createMemoryLedger());
      const billing = new Billing(ledger, configWith({ claimGraceSeconds: 1 }).billing, journal(), recorder().events);
      await billing.admit(keyOf('key_a'), ctxOf(10), 'r1');
      await vi.advanceTimersByTimeAsync(100);
      expect((await ledger.account('ten_1', PERIOD(Date.now()))).held).toBeGreaterThan(0);
      await billing.releaseAllUnclaimed();
      expect((await ledger.account('ten_1', PERIOD(Date.now()))).held).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });

  it('a retry while one is running does not run twice (-1); with nothing journaled it is 0', async () => {
    const ledger = await funded(createMemoryLedger());
    let down = true;
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    const slow: Ledger = {
      ...ledger,
      settle: async (i) => {
        if (down) throw new StoreUnavailableError(new Error('down'));
        await gate;
        return ledger.settle(i);
      },
    };
    const billing = new Billing(slow, cfg.billing, journal(), recorder().events);
    expect(await billing.retryPending()).toBe(0);
    await billing.admit(keyOf('key_a'), ctxOf(10), 'r1');
    billing.claim('ten_1', 'r1');
    await billing.finish({ principal: keyOf('key_a'), ctx: ctxOf(10), requestId: 'r1', usage: { promptTokens: 1, completionTokens: 1, totalTokens: 2, estimated: false }, startedAt: Date.now() });
    down = false;
    const first = billing.retryPending();
    expect(await billing.retryPending()).toBe(-1);
    open();
    expect(await first).toBe(0);
  });
});
