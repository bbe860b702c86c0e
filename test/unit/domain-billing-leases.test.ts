/**
 * Credit leases in the billing service (billing.creditLease), over the memory
 * ledger wrapped to count and fail store calls: requests after the first are
 * admitted with no store call (committed inside the lease; the settlement takes
 * the commitment out of it), or moved out when the lease is not confirmed, the books are exact,
 * the lease goes back when the tenant is idle, at a stop and before a direct hold
 * would be refused, and a store failure stops local admission.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import type { Config } from '../../sidecar/src/config/schema.js';
import { admitBody } from '../../sidecar/src/domain/admission.js';
import type { Principal } from '../../sidecar/src/domain/auth/principal.js';
import { SettlementJournal } from '../../sidecar/src/domain/billing/journal.js';
import { worstCase } from '../../sidecar/src/domain/billing/pricing.js';
import { CONFIRMED_WITHIN_MS } from '../../sidecar/src/domain/billing/credit-leases.js';
import { adjustRecallingLeases, setCapRecallingLeases } from '../../sidecar/src/domain/billing/lease-recall.js';
import { Billing } from '../../sidecar/src/domain/billing/service.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { StoreUnavailableError } from '../../sidecar/src/store/contract.js';
import { InsufficientBalanceError, type Ledger } from '../../sidecar/src/store/ledger-contract.js';
import { createMemoryLedger } from '../../sidecar/src/store/memory-ledger.js';

const base = defaultConfig('svc');
// Nothing here runs out by the wall clock (a loaded box can stall a test's few-millisecond sleep for
// longer than a short idle time or grace period): an unclaimed hold is kept for ten minutes (the tests
// of the claim grace set 1 s and move fake timers), leases never go idle (the tests of idling use
// `idling` with a clock they move), and a test that needs requests committed inside a lease gives
// Billing a clock that stands still (a lease commits only while confirmed within CONFIRMED_WITHIN_MS).
const configWith = (billing: Record<string, unknown>): Config =>
  parseConfig({ ...base, billing: { ...(base.billing as object), creditCheck: true, claimGraceSeconds: 600, ...billing } });
const cfg = configWith({ creditLease: { enabled: true, requests: 8, headroom: 4, idleSeconds: 3600 } });
const idling = configWith({ creditLease: { enabled: true, requests: 8, headroom: 4, idleSeconds: 0.2 } });
const catalog = new Catalog(cfg.models, 'svc');
const principal: Principal = { subjectId: 'key_1', tenantId: 'ten_1', method: 'api_key', scopes: ['ai'], keyId: 'key_1', role: null };
const policy = { catalog, defaultTemperature: 0.7, maxEmbeddingInputs: 256, maxRequestBytes: 1 << 20 };
const ctxOf = (maxTokens = 100) => {
  const a = admitBody('chat', 'POST', Buffer.from(JSON.stringify({ model: 'svc-core', max_tokens: maxTokens, messages: [{ role: 'user', content: 'hi' }] })), policy);
  if (!a.ok) throw new Error('refused');
  return a.ctx;
};
/** The hold of one request of ctxOf(maxTokens). */
const holdOf = (maxTokens = 100) => {
  const ctx = ctxOf(maxTokens);
  return worstCase(cfg.billing.prices[ctx.resolved.internalModel]!, ctx, ctx.promptBytes, ctx.messageCount).cost;
};
const journals = mkdtempSync(join(tmpdir(), 'leases-'));
afterAll(() => rmSync(journals, { recursive: true, force: true }));
const journal = () => new SettlementJournal(join(mkdtempSync(join(journals, 'j-')), 'journal.jsonl'));
const quiet = { settled: () => {}, failed: () => {} };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** A clock that stands still at the time it was made (the test moves nothing with it). */
const still = (): (() => number) => {
  const t = Date.now();
  return () => t;
};
/** Runs `test` with setTimeout on a fake clock (the claim grace's timers); `advance` moves it. */
async function withFakeTimeouts(test: (advance: (ms: number) => Promise<void>) => Promise<void>): Promise<void> {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
  try {
    await test(async (ms) => {
      await vi.advanceTimersByTimeAsync(ms);
      await new Promise((r) => setImmediate(r)); // what the timers started, on the memory ledger, is done
    });
  } finally {
    vi.useRealTimers();
  }
}
const PERIOD = new Date().toISOString().slice(0, 7);
const usage = { promptTokens: 10, completionTokens: 5, totalTokens: 15, estimated: false };

/** The memory ledger, counting calls per method; `fail` makes a method reject as an unreachable store. */
function countingLedger() {
  const inner = createMemoryLedger();
  const calls: Record<string, number> = {};
  const fail = new Set<string>();
  const ledger = new Proxy(inner, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof v !== 'function' || typeof prop !== 'string') return v;
      return (...args: unknown[]) => {
        calls[prop] = (calls[prop] ?? 0) + 1;
        if (fail.has(prop)) return Promise.reject(new StoreUnavailableError(new Error('down')));
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  }) as Ledger;
  return { ledger, calls, fail };
}

const settle = (b: Billing, requestId: string, ctx = ctxOf()) => b.finish({ principal, ctx, requestId, usage, startedAt: Date.now() });

/** The counting ledger with `amount` granted to ten_1. */
async function funded(amount = 10_000_000, now = Date.now()) {
  const c = countingLedger();
  await c.ledger.adjustBalance('ten_1', amount, 'g', 'grant', now);
  return c;
}

/**
 * req-0 admitted (held directly), and the lease it opens in the background
 * waited for (a fixed few milliseconds were not always enough on a busy box).
 */
async function firstRequest(billing: Billing): Promise<void> {
  expect((await billing.admit(principal, ctxOf(), 'req-0')).ok).toBe(true);
  for (const deadline = Date.now() + 5000; billing.leased === 0 && Date.now() < deadline; ) await sleep(2);
}

/**
 * A funded tenant and two instances on its ledger (the one that admits, the one that processes),
 * with a claim grace of 1 s (tests with it move fake timers) and one clock that stands still.
 */
async function twoInstances() {
  const { ledger } = await funded(10_000_000);
  const graceful = configWith({ claimGraceSeconds: 1, creditLease: { enabled: true, requests: 8, headroom: 4, idleSeconds: 3600 } }).billing;
  const clock = still();
  return { ledger, authzSide: new Billing(ledger, graceful, journal(), quiet, clock, 'inst-a'), procSide: new Billing(ledger, graceful, journal(), quiet, clock, 'inst-b') };
}

/** req-0 held directly, req-1 committed inside the lease it opened; `recall` reaches this one instance (recorded). */
async function committedOne(settings = cfg.billing, clock: () => number = still()) {
  const { ledger, calls, fail } = await funded(10_000_000);
  const billing = new Billing(ledger, settings, journal(), quiet, clock);
  await firstRequest(billing);
  expect((await billing.admit(principal, ctxOf(), 'req-1')).ok).toBe(true);
  const recalls: string[] = [];
  const recall = async (t: string) => {
    recalls.push(t);
    void billing.recallReceived(t);
  };
  return { ledger, calls, fail, billing, hold: holdOf(), recalls, recall };
}

describe('Billing with credit leases', () => {
  it('after the first request opens a lease, the next are admitted with no store call, committed inside it; settled out of it; the books are exact; idle gives it back', async () => {
    const { ledger, calls } = await funded(10_000_000);
    let t = Date.now();
    const billing = new Billing(ledger, idling.billing, journal(), quiet, () => t);
    const hold = holdOf();
    await firstRequest(billing);
    expect(calls.extendLease).toBe(1);
    expect(billing.leased).toBe(hold * 8);
    const before = { ...calls };
    const first = await billing.admit(principal, ctxOf(), 'req-0-again');
    expect(first).toMatchObject({ ok: true, admitted: { held: hold, leased: true, lease: expect.stringMatching(/^lease\./) } });
    billing.claim('ten_1', 'req-0-again', true);
    // Nothing delivered: the commitment goes back to the lease, with no store call either.
    await billing.finish({ principal, ctx: null, requestId: 'req-0-again', usage: null, startedAt: Date.now() });
    expect(billing.leased).toBe(hold * 8);
    for (let i = 1; i <= 5; i++) expect(await billing.admit(principal, ctxOf(), `req-${i}`)).toMatchObject({ ok: true, admitted: { leased: true } });
    // Six admissions and a release: not one store call (the lease may grow in the background).
    for (const op of ['reserve', 'moveFromLease', 'release', 'releaseUnclaimed', 'claim', 'settle']) expect(calls[op]).toBe(before[op]);
    // Nothing to wait for before the provider: the lease holds the credit.
    for (let i = 1; i <= 5; i++) {
      billing.claim('ten_1', `req-${i}`, true);
      expect(billing.confirmation(`req-${i}`)).toBeNull();
    }
    expect(billing.confirmation('req-0')).toBeNull(); // held directly: nothing to wait for
    // In the store: req-0's hold and the whole lease (the commitments are inside it).
    expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ held: hold, leased: billing.leased + hold * 5 });
    expect(billing.claim('ten_1', 'req-0')).toBe(true);
    for (let i = 0; i <= 5; i++) await settle(billing, `req-${i}`);
    expect(calls.settle).toBe(6);
    expect(calls.release ?? 0).toBe(0);
    const charges = (await ledger.usageRecords('ten_1', 100)).reduce((s, r) => s + r.cost, 0);
    expect(charges).toBeGreaterThan(0);
    expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ balance: 10_000_000 - charges, held: 0, leased: billing.leased });
    await sleep(250); // sweeps (every 100 ms) find it used just now
    expect(billing.leased).toBeGreaterThan(0);
    t += 300; // idle for longer than idleSeconds
    await sleep(250);
    expect(billing.leased).toBe(0);
    expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ balance: 10_000_000 - charges, held: 0, leased: 0 });
  });

  it('the lease grows in the background when it runs low, so a steady tenant keeps being admitted locally', async () => {
    const { ledger, calls } = await funded(100_000_000);
    const billing = new Billing(ledger, cfg.billing, journal(), quiet);
    for (let i = 0; i < 40; i++) {
      expect((await billing.admit(principal, ctxOf(), `req-${i}`)).ok).toBe(true);
      billing.claim('ten_1', `req-${i}`);
      await settle(billing, `req-${i}`);
      await sleep(1);
    }
    expect(calls.reserve).toBeLessThanOrEqual(2);
    expect(calls.extendLease).toBeGreaterThan(1);
    await billing.stopLeasing();
    const a = await ledger.account('ten_1', PERIOD);
    const charges = (await ledger.usageRecords('ten_1', 100)).reduce((s, r) => s + r.cost, 0);
    expect(a).toMatchObject({ held: 0, leased: 0, balance: 100_000_000 - charges });
  });

  it('never refuses for want of credit what its own lease would have paid for: the lease goes back and the hold is placed', async () => {
    const { ledger } = countingLedger();
    const hold = holdOf();
    const big = holdOf(4000);
    // Enough for the big request alone, once the lease (a quarter of the rest) is given back.
    await ledger.adjustBalance('ten_1', big + hold, 'g', 'grant', Date.now());
    const billing = new Billing(ledger, cfg.billing, journal(), quiet);
    expect((await billing.admit(principal, ctxOf(), 'req-small')).ok).toBe(true);
    await sleep(5);
    expect(billing.leased).toBeGreaterThan(0);
    expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ held: hold, leased: billing.leased });
    // The big one does not fit beside the lease; it fits beside the small request's own hold.
    const r = await billing.admit(principal, ctxOf(4000), 'req-big');
    expect(r.ok).toBe(true);
    expect(billing.leased).toBe(0);
    expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ held: hold + big, leased: 0 });
    // More than the balance is still a 402, and nothing more is held.
    const refused = await billing.admit(principal, ctxOf(), 'req-over');
    expect(refused.ok).toBe(false);
    if (!refused.ok) expect(refused.error.entry.code).toBe('insufficient_credit');
    expect((await ledger.account('ten_1', PERIOD)).held).toBe(hold + big);
  });

  it('a cap set after the lease was granted: the next settlement out of it reports it stale, it goes back once the requests in it moved out, and admissions are held directly again', async () => {
    const { ledger, calls } = await funded(10_000_000);
    const billing = new Billing(ledger, cfg.billing, journal(), quiet, still());
    const hold = holdOf();
    await firstRequest(billing);
    expect(billing.leased).toBeGreaterThan(0);
    expect((await billing.admit(principal, ctxOf(), 'req-1')).ok).toBe(true); // committed
    expect((await billing.admit(principal, ctxOf(), 'req-2')).ok).toBe(true); // committed
    // A cap with room for req-0 and req-1 besides what is spent (the lease was granted under no cap).
    await ledger.setCap('ten_1', hold * 2);
    await settle(billing, 'req-1');
    await sleep(5);
    // Stale: req-2, still in flight, got a hold of its own; the rest of the lease went back.
    expect(billing.leased).toBe(0);
    expect(calls.moveFromLease).toBe(1);
    expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ held: hold * 2, leased: 0 });
    // The cap is reached now: a direct 429, from ext_authz.
    const reached = await billing.admit(principal, ctxOf(), 'req-3');
    expect(reached.ok).toBe(false);
    if (!reached.ok) expect(reached.error.entry.code).toBe('spend_cap_exceeded');
    // req-2 settles from its own hold.
    await settle(billing, 'req-2');
    expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ held: hold, leased: 0 });
  });

  it('a deduct never takes leased credit: refused with `leased` until the lease is recalled (what is committed in it moves out first), then it applies', async () => {
    const { ledger, calls } = await funded(10_000_000);
    const billing = new Billing(ledger, cfg.billing, journal(), quiet, still());
    const hold = holdOf();
    await firstRequest(billing);
    expect((await billing.admit(principal, ctxOf(), 'req-1')).ok).toBe(true); // committed
    const all = 10_000_000 - hold * 2; // everything but what the two requests may cost
    const refused = await ledger.adjustBalance('ten_1', -all, 'd', 'deduct', Date.now()).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(InsufficientBalanceError);
    expect((refused as InsufficientBalanceError).leased).toBe(true);
    await billing.recallReceived('ten_1');
    expect(calls.moveFromLease).toBe(1); // req-1 has a hold of its own now
    expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ held: hold * 2, leased: 0 });
    expect(await ledger.adjustBalance('ten_1', -all, 'd', 'deduct', Date.now())).toMatchObject({ balanceAfter: hold * 2 });
    // Both requests are still paid for in full.
    await settle(billing, 'req-1');
    expect(billing.claim('ten_1', 'req-0')).toBe(true);
    await settle(billing, 'req-0');
    const charges = (await ledger.usageRecords('ten_1', 100)).reduce((s, r) => s + r.cost, 0);
    expect((await ledger.ledger('ten_1', 10)).filter((e) => e.type === 'charge')).toHaveLength(2);
    expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ balance: hold * 2 - charges, held: 0, leased: 0 });
    // No lease for a moment after the refusal: the next request is held directly.
    expect(await billing.admit(principal, ctxOf(), 'req-2')).toMatchObject({ ok: true, admitted: { leased: false } });
  });

  it('adjustRecallingLeases: a deduct leases stand in the way of recalls them once and applies when they are back; with no one to give them back it is refused after a second', async () => {
    const { ledger, calls, billing, hold, recalls, recall } = await committedOne();
    const entry = await adjustRecallingLeases(ledger, recall, 'ten_1', -(10_000_000 - hold * 2), 'd-1', 'correction', Date.now);
    expect(entry).toMatchObject({ type: 'deduct', balanceAfter: hold * 2, replayed: false });
    expect(recalls).toEqual(['ten_1']);
    expect(calls.moveFromLease).toBe(1); // req-1 holds its own now
    // Grants and deducts that fit go straight through; more than requests hold is refused at once.
    expect(await adjustRecallingLeases(ledger, async () => { throw new Error('no recall expected'); }, 'ten_1', 5, 'g-2', 'grant', Date.now)).toMatchObject({ balanceAfter: hold * 2 + 5 });
    await expect(adjustRecallingLeases(ledger, async () => { throw new Error('no recall expected'); }, 'ten_1', -(hold + 6), 'd-2', 'too much', Date.now)).rejects.toMatchObject({ leased: false });

    // A lease nobody gives back (its instance is deaf): refused with `leased` once half of LEASE_BLOCK_MS passed.
    const other = await funded(1_000_000);
    const deaf = new Billing(other.ledger, cfg.billing, journal(), quiet);
    await firstRequest(deaf);
    let t = Date.now();
    const clock = () => (t += 100);
    const deafRecalls: string[] = [];
    // The recall cannot even be sent (the broadcast is down): the same answer.
    const broken = async (x: string) => {
      deafRecalls.push(x);
      throw new Error('broadcast down');
    };
    const err = await adjustRecallingLeases(other.ledger, broken, 'ten_1', -(1_000_000 - hold), 'd-3', 'all of it', clock).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InsufficientBalanceError);
    expect((err as InsufficientBalanceError).leased).toBe(true);
    expect(deafRecalls).toEqual(['ten_1']);
    expect((await other.ledger.ledger('ten_1', 10)).filter((e) => e.type === 'deduct')).toHaveLength(0);
    await deaf.stopLeasing();
  });

  it('setCapRecallingLeases: the leases granted under the old cap come back before it returns (committed requests moved out); a deaf instance leaves them, reported', async () => {
    const { ledger, calls, billing, hold, recalls, recall } = await committedOne();
    expect(await setCapRecallingLeases(ledger, recall, 'ten_1', hold * 2, Date.now)).toBe(0);
    expect(recalls).toEqual(['ten_1']);
    expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ cap: hold * 2, held: hold * 2, leased: 0 });
    expect(calls.moveFromLease).toBe(1);
    // Requests after it meet the new cap at once (here: reached).
    const r = await billing.admit(principal, ctxOf(), 'req-2');
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.entry.code).toBe('spend_cap_exceeded');
    // With no lease anywhere it does not recall at all.
    const none: string[] = [];
    expect(await setCapRecallingLeases(ledger, async (t) => void none.push(t), 'ten_1', null, Date.now)).toBe(0);
    expect(none).toEqual([]);

    const other = await funded(1_000_000);
    const deaf = new Billing(other.ledger, cfg.billing, journal(), quiet);
    await firstRequest(deaf);
    let t = Date.now();
    const left = await setCapRecallingLeases(other.ledger, async () => { throw new Error('broadcast down'); }, 'ten_1', 5_000_000, () => (t += 100));
    expect((await other.ledger.account('ten_1', PERIOD)).cap).toBe(5_000_000); // set all the same
    expect(left).toBe(deaf.leased);
    expect(left).toBeGreaterThan(0);
    await deaf.stopLeasing();
  });

  it('a settlement that waits in the journal does not keep its lease alive: going idle, the lease moves the commitment into a hold of its own, which the retried settlement settles', async () => {
    let t = Date.now();
    const { ledger, calls, fail, billing, hold } = await committedOne(idling.billing, () => t);
    billing.claim('ten_1', 'req-1', true);
    fail.add('settle');
    await settle(billing, 'req-1'); // journaled, with its commitment
    expect(calls.moveFromLease ?? 0).toBe(0);
    expect(billing.claim('ten_1', 'req-0')).toBe(true);
    await billing.finish({ principal, ctx: null, requestId: 'req-0', usage: null, startedAt: Date.now() });
    t += 300; // idle for longer than idleSeconds
    await sleep(250); // a sweep (every 100 ms)
    expect(calls.moveFromLease).toBe(1);
    expect(billing.leased).toBe(0);
    expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ held: hold, leased: 0 }); // req-1's own hold
    fail.clear();
    expect(await billing.retryPending()).toBe(0);
    const [rec] = await ledger.usageRecords('ten_1', 1);
    expect(rec?.requestId).toBe('req-1');
    expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ balance: 10_000_000 - rec!.cost, held: 0, leased: 0 });
  });

  it('a commitment nobody processed: after the claim grace its tombstone is written and it goes back to the lease; one another process moved out does not', () =>
    withFakeTimeouts(async (advance) => {
      const { ledger, authzSide, procSide } = await twoInstances();
      const hold = holdOf();
      expect((await authzSide.admit(principal, ctxOf(), 'req-0')).ok).toBe(true);
      expect(authzSide.claim('ten_1', 'req-0')).toBe(true);
      await advance(5);
      const full = authzSide.leased;
      const lost = await authzSide.admit(principal, ctxOf(), 'req-lost');
      const taken = await authzSide.admit(principal, ctxOf(300), 'req-taken'); // a different amount: each is told apart
      if (!lost.ok || !taken.ok || !taken.admitted.lease) throw new Error('not committed');
      const bigger = holdOf(300);
      await advance(5); // the lease may grow meanwhile
      const before = authzSide.leased;
      expect(before).toBeLessThan(full + 8 * bigger);
      expect(procSide.claim('ten_1', 'req-taken', true, { id: taken.admitted.lease, amount: bigger })).toBe(false);
      expect(await procSide.confirmation('req-taken')).toBeNull();
      await advance(1300); // authzSide's grace passes
      expect(authzSide.leased).toBe(before + hold); // req-lost's back; req-taken's left the lease in the store
      expect(await ledger.moveFromLease({ tenantId: 'ten_1', leaseId: taken.admitted.lease, requestId: 'req-lost', keyId: null, amount: hold, period: PERIOD, holdTtlSeconds: 60, leaseSeconds: 15, owner: 'x', now: Date.now(), admitted: true })).toBe('exists');
      await settle(procSide, 'req-taken', ctxOf(300));
      await settle(authzSide, 'req-0');
      await authzSide.stopLeasing();
      const charges = (await ledger.usageRecords('ten_1', 100)).reduce((sum, r) => sum + r.cost, 0);
      expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ balance: 10_000_000 - charges, held: 0, leased: 0 });
    }));

  it('a direct hold says so (not leased); it leaves an open lease alone; a refusal without a lease asks the store once', async () => {
    const { ledger, calls } = await funded(100_000_000);
    const billing = new Billing(ledger, cfg.billing, journal(), quiet);
    expect(await billing.admit(principal, ctxOf(), 'req-0')).toMatchObject({ ok: true, admitted: { held: holdOf(), leased: false } });
    await sleep(5);
    const leased = billing.leased;
    expect(leased).toBe(holdOf() * 8);
    // Too big for the lease: held directly; the lease stays as it was.
    expect(await billing.admit(principal, ctxOf(30_000), 'req-big')).toMatchObject({ ok: true, admitted: { leased: false } });
    await sleep(5);
    expect(billing.leased).toBeGreaterThanOrEqual(leased);
    expect(calls.release ?? 0).toBe(0);
    // Another tenant with no credit and no lease: one reserve, refused.
    const before = calls.reserve ?? 0;
    const r = await billing.admit({ ...principal, tenantId: 'ten_poor' }, ctxOf(), 'req-poor');
    expect(r.ok).toBe(false);
    expect(calls.reserve).toBe(before + 1);
  });

  it('a rate-limit refusal never costs the lease (reloaded with limits while one is open)', async () => {
    const { ledger } = await funded(100_000_000);
    const billing = new Billing(ledger, cfg.billing, journal(), quiet);
    await firstRequest(billing);
    const leased = billing.leased;
    expect(leased).toBeGreaterThan(0);
    const limited = configWith({ creditLease: { enabled: true, requests: 8, headroom: 4, idleSeconds: 3600 }, rateLimits: { requestsPerMinute: 1 } });
    billing.reconfigure(limited.billing, catalog.all());
    expect((await billing.admit(principal, ctxOf(), 'req-1')).ok).toBe(true);
    const r = await billing.admit(principal, ctxOf(), 'req-2');
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.entry.code).toBe('rate_limit_exceeded');
    expect(billing.leased).toBe(leased);
  });

  it('the store failing while a refused admission asks again (its own lease given back): 503', async () => {
    const { ledger, fail } = countingLedger();
    const hold = holdOf();
    await ledger.adjustBalance('ten_1', holdOf(4000) + hold, 'g', 'grant', Date.now());
    const inner = ledger.reserve.bind(ledger);
    let reserves = 0;
    const flaky = new Proxy(ledger, {
      get(target, prop, receiver) {
        if (prop === 'reserve') {
          return (input: Parameters<Ledger['reserve']>[0]) => {
            reserves += 1;
            if (reserves === 3) fail.add('reserve');
            return inner(input).finally(() => fail.delete('reserve'));
          };
        }
        return Reflect.get(target, prop, receiver) as unknown;
      },
    }) as Ledger;
    const billing = new Billing(flaky, cfg.billing, journal(), quiet);
    expect((await billing.admit(principal, ctxOf(), 'req-small')).ok).toBe(true); // reserve 1
    await sleep(5);
    const r = await billing.admit(principal, ctxOf(4000), 'req-big'); // reserve 2 refused, 3 fails
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.entry.code).toBe('credits_unavailable');
  });

  it("a lease admission moved out (not confirmed lately) whose lease went stale: the direct hold's refusal is the answer (cap reached: 429; the store down: 503)", async () => {
    const { ledger, fail } = await funded(10_000_000);
    let t = Date.now();
    const billing = new Billing(ledger, cfg.billing, journal(), quiet, () => t);
    await firstRequest(billing);
    t += CONFIRMED_WITHIN_MS + 1;
    await ledger.setCap('ten_1', holdOf()); // only req-0's hold fits
    expect(await billing.admit(principal, ctxOf(), 'req-1')).toMatchObject({ ok: true, admitted: { leased: true } });
    billing.claim('ten_1', 'req-1', true);
    expect((await billing.confirmation('req-1'))?.entry.code).toBe('spend_cap_exceeded');

    await ledger.setCap('ten_1', null);
    expect((await billing.admit(principal, ctxOf(), 'req-2')).ok).toBe(true);
    await sleep(5);
    await ledger.setCap('ten_1', 1_000_000_000);
    fail.add('reserve');
    t += CONFIRMED_WITHIN_MS + 1;
    expect(await billing.admit(principal, ctxOf(), 'req-3')).toMatchObject({ ok: true, admitted: { leased: true, lease: null } });
    billing.claim('ten_1', 'req-3', true);
    expect((await billing.confirmation('req-3'))?.entry.code).toBe('credits_unavailable');
  });

  it("the cap's answer counts another instance's lease: what remains is cap - spent - held - leased", async () => {
    const { ledger } = await funded(1_000_000_000);
    const a = new Billing(ledger, cfg.billing, journal(), quiet, Date.now, 'inst-a');
    const b = new Billing(ledger, configWith({ creditLease: { enabled: false } }).billing, journal(), quiet, Date.now, 'inst-b');
    expect((await a.admit(principal, ctxOf(), 'req-a')).ok).toBe(true);
    await sleep(5);
    const acct = await ledger.account('ten_1', PERIOD);
    expect(acct.leased).toBeGreaterThan(0);
    await ledger.setCap('ten_1', acct.held + acct.leased + 7); // set before A's lease goes stale: it still counts until given back
    const r = await b.admit(principal, ctxOf(100), 'req-b');
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.message).toContain('Only 7 micro-units');
  });

  it('claims across processes: a direct hold needs no confirmation; a claim the store cannot answer is a 503', async () => {
    const { ledger, fail } = await funded(10_000_000);
    const authzSide = new Billing(ledger, configWith({ creditLease: { enabled: false } }).billing, journal(), quiet, Date.now, 'inst-a');
    const procSide = new Billing(ledger, cfg.billing, journal(), quiet, Date.now, 'inst-b');
    expect((await authzSide.admit(principal, ctxOf(), 'req-d')).ok).toBe(true);
    expect(procSide.claim('ten_1', 'req-d')).toBe(false);
    expect(procSide.confirmation('req-d')).toBeNull();
    fail.add('claim');
    expect(procSide.claim('ten_1', 'req-x', true)).toBe(false);
    expect((await procSide.confirmation('req-x'))?.entry.code).toBe('credits_unavailable');
  });

  it("another instance's lease in the way: it is recalled, and the request is held once it went back; without a recall it would be refused", async () => {
    const run = async (deliver: boolean) => {
      const { ledger } = countingLedger();
      const hold = holdOf();
      const big = holdOf(4000);
      await ledger.adjustBalance('ten_1', big + hold * 2, 'g', 'grant', Date.now());
      const recalls: string[] = [];
      const instances: Billing[] = [];
      const peers = { recall: async (t: string) => { recalls.push(t); if (deliver) for (const b of instances) void b.recallReceived(t); } };
      const a = new Billing(ledger, cfg.billing, journal(), quiet, Date.now, 'inst-a', peers);
      const b = new Billing(ledger, cfg.billing, journal(), quiet, Date.now, 'inst-b', peers);
      instances.push(a, b);
      expect((await a.admit(principal, ctxOf(), 'req-a')).ok).toBe(true);
      await sleep(5);
      expect(a.leased).toBeGreaterThan(0);
      const r = await b.admit(principal, ctxOf(4000), 'req-b');
      return { r, recalls, a, ledger };
    };
    const recalled = await run(true);
    expect(recalled.r.ok).toBe(true);
    expect(recalled.recalls).toEqual(['ten_1']);
    expect(recalled.a.leased).toBe(0);
    const deaf = await run(false);
    expect(deaf.r.ok).toBe(false);
    if (!deaf.r.ok) expect(deaf.r.error.entry.code).toBe('insufficient_credit');
    expect(deaf.recalls).toEqual(['ten_1']);
  });

  it('a refusal with no lease anywhere recalls nothing; with leases off it does not even look', async () => {
    const { ledger, calls } = countingLedger();
    const recalls: string[] = [];
    const peers = { recall: async (t: string) => { recalls.push(t); } };
    const billing = new Billing(ledger, cfg.billing, journal(), quiet, Date.now, 'inst-a', peers);
    expect((await billing.admit(principal, ctxOf(), 'req-poor')).ok).toBe(false);
    expect(recalls).toEqual([]);
    expect(calls.account).toBe(1);
    const off = new Billing(ledger, configWith({ creditLease: { enabled: false } }).billing, journal(), quiet, Date.now, 'inst-b', peers);
    expect((await off.admit(principal, ctxOf(), 'req-poor-2')).ok).toBe(false);
    expect(calls.account).toBe(1); // no account read on the refusal path
    expect(recalls).toEqual([]);
  });

  it('with rate limits on, every request is held directly (the per-minute counters count each one)', async () => {
    const { ledger, calls } = await funded(10_000_000);
    const limited = configWith({ creditLease: { enabled: true }, rateLimits: { requestsPerMinute: 1000 } });
    const billing = new Billing(ledger, limited.billing, journal(), quiet);
    for (let i = 0; i < 5; i++) expect((await billing.admit(principal, ctxOf(), `req-${i}`)).ok).toBe(true);
    await sleep(5);
    expect(calls.reserve).toBe(5);
    expect(calls.extendLease).toBeUndefined();
    expect(billing.leased).toBe(0);
  });

  it('on by default; turned off, every request is held directly', async () => {
    expect(configWith({}).billing.creditLease.enabled).toBe(true);
    const { ledger, calls } = await funded(10_000_000);
    const billing = new Billing(ledger, configWith({ creditLease: { enabled: false } }).billing, journal(), quiet);
    for (let i = 0; i < 3; i++) expect((await billing.admit(principal, ctxOf(), `req-${i}`)).ok).toBe(true);
    await sleep(5);
    expect(calls.reserve).toBe(3);
    expect(calls.extendLease).toBeUndefined();
  });

  it('a move the store cannot take stops local admission: the next requests are held directly (and refused while the store is down)', async () => {
    const { ledger, calls, fail } = await funded(10_000_000);
    const events: string[] = [];
    let t = Date.now();
    const billing = new Billing(ledger, cfg.billing, journal(), { ...quiet, failed: (what) => events.push(what) }, () => t);
    await firstRequest(billing);
    t += CONFIRMED_WITHIN_MS + 1; // not confirmed lately: moved out, not committed
    fail.add('moveFromLease');
    fail.add('release');
    expect((await billing.admit(principal, ctxOf(), 'req-1')).ok).toBe(true);
    // Not confirmed: the response processing refuses it (503) and it never reaches the provider.
    billing.claim('ten_1', 'req-1', true);
    expect((await billing.confirmation('req-1'))?.entry.code).toBe('credits_unavailable');
    expect(events).toContain('lease');
    expect(billing.leased).toBe(0);
    fail.add('reserve');
    const r = await billing.admit(principal, ctxOf(), 'req-2');
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.entry.code).toBe('credits_unavailable');
    expect(calls.moveFromLease).toBe(1);
    // The store is back: the lease that could not be given back runs out and the reaper releases it.
    fail.clear();
    const a = await ledger.account('ten_1', PERIOD);
    expect(a.leased).toBeGreaterThan(0);
    expect(await ledger.reapExpired('ten_1', t + cfg.billing.holdLeaseSeconds * 1000 + 1)).toBeGreaterThan(0);
  });

  it('a stop gives every lease back; no lease is opened after it', async () => {
    const { ledger, calls } = await funded(10_000_000);
    await ledger.adjustBalance('ten_2', 10_000_000, 'g', 'grant', Date.now());
    const billing = new Billing(ledger, cfg.billing, journal(), quiet);
    expect((await billing.admit(principal, ctxOf(), 'a-1')).ok).toBe(true);
    expect((await billing.admit({ ...principal, tenantId: 'ten_2' }, ctxOf(), 'b-1')).ok).toBe(true);
    await sleep(5);
    expect(billing.leased).toBe(holdOf() * 16);
    await billing.stopLeasing();
    expect(billing.leased).toBe(0);
    expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ held: holdOf(), leased: 0 });
    expect(await ledger.account('ten_2', PERIOD)).toMatchObject({ held: holdOf(), leased: 0 });
    const opened = calls.extendLease;
    expect((await billing.admit(principal, ctxOf(), 'a-2')).ok).toBe(true);
    await sleep(5);
    expect(calls.extendLease).toBe(opened);
  });

  it('a lease is renewed with the live holds, and replaced once it reaches half its ttl', async () => {
    const { ledger, calls } = countingLedger();
    let t = Date.now();
    const clock = () => t;
    await ledger.adjustBalance('ten_1', 10_000_000, 'g', 'grant', t);
    const billing = new Billing(ledger, configWith({ holdTtlSeconds: 60, creditLease: { enabled: true, idleSeconds: 3600 } }).billing, journal(), quiet, clock);
    await firstRequest(billing);
    const first = billing.leased;
    expect(first).toBeGreaterThan(0);
    // Renewed every 5 s for 25 s: still there, not reaped.
    for (let i = 0; i < 5; i++) {
      t += 5_000;
      await billing.renewLeases();
      expect(await ledger.reapExpired('ten_1', t)).toBe(0);
    }
    expect((await billing.admit(principal, ctxOf(), 'req-1')).ok).toBe(true);
    expect(calls.reserve).toBe(1);
    t += 5_000; // 30 s: half the ttl
    expect((await billing.admit(principal, ctxOf(), 'req-2')).ok).toBe(true);
    expect(calls.reserve).toBe(2); // held directly while a fresh lease opens
    await sleep(5);
    expect(calls.extendLease).toBe(2);
    expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ held: holdOf() * 3, leased: billing.leased });
  });

  it('committed in one instance\'s lease, processed by another: that one moves it out into a claimed hold; one nobody processed goes back to the lease', () =>
    withFakeTimeouts(async (advance) => {
      const { ledger, authzSide, procSide } = await twoInstances();
      expect((await authzSide.admit(principal, ctxOf(), 'req-0')).ok).toBe(true);
      await advance(5);
      const r1 = await authzSide.admit(principal, ctxOf(), 'req-1');
      expect(r1).toMatchObject({ ok: true, admitted: { leased: true } });
      if (!r1.ok || !r1.admitted.lease) throw new Error('not committed');
      const commitment = { id: r1.admitted.lease, amount: r1.admitted.held };
      expect((await authzSide.admit(principal, ctxOf(), 'req-lost')).ok).toBe(true); // nobody will process it
      // A cap change since (the lease is stale): a request admitted before still moves out.
      await ledger.setCap('ten_1', 1_000_000_000);
      // The other instance moves it out of the first one's lease (named in the metadata) before it goes on.
      expect(procSide.claim('ten_1', 'req-1', true, commitment)).toBe(false);
      expect(await procSide.confirmation('req-1')).toBeNull();
      expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ held: holdOf() * 2 });
      // A missing lease or request refuses.
      expect(procSide.claim('ten_1', 'req-nolease', true, { id: 'lease.none', amount: 1 })).toBe(false);
      expect((await procSide.confirmation('req-nolease'))?.entry.code).toBe('credits_unavailable');
      expect(procSide.claim('ten_1', 'req-unknown', true)).toBe(false);
      expect((await procSide.confirmation('req-unknown'))?.entry.code).toBe('credits_unavailable');
      await procSide.finish({ principal, ctx: null, requestId: 'req-unknown', usage: null, startedAt: Date.now() });
      await advance(1300); // authzSide's grace passes: the claimed hold stays; req-lost's commitment goes back to the lease
      expect(authzSide.inFlight.unclaimed).toBe(0);
      expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ held: holdOf() }); // req-1's, claimed there (req-0 released)
      // Claimed there: a second claim (a retried stream) finds the hold.
      expect(procSide.claim('ten_1', 'req-1', true, commitment)).toBe(false);
      expect(await procSide.confirmation('req-1')).toBeNull();
      await settle(procSide, 'req-1');
      const [rec] = await ledger.usageRecords('ten_1', 1);
      expect(rec?.requestId).toBe('req-1');
      // req-lost's tombstone: nothing can move it out any more.
      expect(procSide.claim('ten_1', 'req-lost', true, commitment)).toBe(false);
      expect((await procSide.confirmation('req-lost'))?.entry.code).toBe('credits_unavailable');
      await authzSide.stopLeasing();
      // req-0 was never claimed: released after the grace. Nothing else is held.
      expect(await ledger.account('ten_1', PERIOD)).toMatchObject({ held: 0, leased: 0, balance: 10_000_000 - rec!.cost });
    }));

  it('property: any mix of admissions, settlements and releases across tenants, then a stop: nothing held, balance = grants - charges = usage', async () => {
    type Step = { tenant: number; maxTokens: number; end: 'settle' | 'release' | 'open' };
    const step = fc.record({
      tenant: fc.integer({ min: 0, max: 2 }),
      maxTokens: fc.integer({ min: 1, max: 3000 }),
      end: fc.constantFrom<Step['end']>('settle', 'settle', 'release', 'open'),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 40 }), fc.integer({ min: 0, max: 3 }), async (steps, grantSteps) => {
        const { ledger } = countingLedger();
        const grant = 200_000 * (grantSteps + 1);
        for (const t of [0, 1, 2]) await ledger.adjustBalance(`ten_${t}`, grant, 'g', 'grant', Date.now());
        const billing = new Billing(ledger, cfg.billing, journal(), quiet);
        const open: Array<{ p: Principal; id: string; ctx: ReturnType<typeof ctxOf> }> = [];
        let n = 0;
        for (const s of steps) {
          const p = { ...principal, tenantId: `ten_${s.tenant}` };
          const id = `r${n++}`;
          const ctx = ctxOf(s.maxTokens);
          const r = await billing.admit(p, ctx, id);
          if (r.ok) {
            billing.claim(p.tenantId, id);
            if (s.end === 'open') open.push({ p, id, ctx });
            else await billing.finish({ principal: p, ctx, requestId: id, usage: s.end === 'settle' ? usage : null, startedAt: Date.now() });
          }
          for (const t of [0, 1, 2]) {
            const a = await ledger.account(`ten_${t}`, PERIOD);
            expect(a.balance).toBeGreaterThanOrEqual(0);
            expect(a.held + a.leased).toBeLessThanOrEqual(a.balance);
          }
          await sleep(0);
        }
        for (const o of open) await billing.finish({ principal: o.p, ctx: o.ctx, requestId: o.id, usage, startedAt: Date.now() });
        await billing.stopLeasing();
        for (const t of [0, 1, 2]) {
          const a = await ledger.account(`ten_${t}`, PERIOD);
          const charges = (await ledger.usageRecords(`ten_${t}`, 1000)).reduce((s, r) => s + r.cost, 0);
          const ledgerCharges = 0 - (await ledger.ledger(`ten_${t}`, 1000)).filter((e) => e.type === 'charge').reduce((s, e) => s + e.amount, 0);
          expect(a.held).toBe(0);
          expect(a.leased).toBe(0);
          expect(a.balance).toBe(grant - charges);
          expect(ledgerCharges).toBe(charges);
        }
      }),
      { numRuns: 60 },
    );
  }, 60_000);
});
