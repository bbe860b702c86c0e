import { appendFileSync, existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { admitBody } from '../../sidecar/src/domain/admission.js';
import type { Principal } from '../../sidecar/src/domain/auth/principal.js';
import { SettlementJournal } from '../../sidecar/src/domain/billing/journal.js';
import { Billing } from '../../sidecar/src/domain/billing/service.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { NotReplicatedError, StoreUnavailableError } from '../../sidecar/src/store/contract.js';
import type { Ledger } from '../../sidecar/src/store/ledger-contract.js';
import { createMemoryLedger } from '../../sidecar/src/store/memory-ledger.js';

/** The billing service over the memory ledger: holds, claims, settlement and the journal. */
const cfg = parseConfig({ ...defaultConfig('svc'), billing: { ...(defaultConfig('svc').billing as object), creditCheck: true, claimGraceSeconds: 1 } });
const catalog = new Catalog(cfg.models, 'svc');
/** Direct holds only (credit leases are domain-billing-leases.test.ts's). */
const direct = { ...cfg.billing, creditLease: { ...cfg.billing.creditLease, enabled: false } };
const principal: Principal = { subjectId: 'key_1', tenantId: 'ten_1', method: 'api_key', scopes: ['ai'], keyId: 'key_1', role: null };
const policy = { catalog, defaultTemperature: 0.7, maxEmbeddingInputs: 256, maxRequestBytes: 1 << 20 };
const ctxOf = (content: string) => {
  const a = admitBody('chat', 'POST', Buffer.from(JSON.stringify({ model: 'svc-core', max_tokens: 100, messages: [{ role: 'user', content }] })), policy);
  if (!a.ok) throw new Error('refused');
  return a.ctx;
};
const journals = mkdtempSync(join(tmpdir(), 'billing-'));
afterAll(() => rmSync(journals, { recursive: true, force: true }));
const journal = () => new SettlementJournal(join(mkdtempSync(join(journals, 'j-')), 'journal.jsonl'));
const quiet = { settled: () => {}, failed: () => {} };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Three requests admitted and finished over `ledger` (whose settle fails for now): three settlements journaled, in order. */
async function threeJournaled(ledger: Ledger): Promise<{ j: SettlementJournal; billing: Billing }> {
  const j = journal();
  const billing = new Billing(ledger, direct, j, quiet);
  const usage = { promptTokens: 10, completionTokens: 5, totalTokens: 15, estimated: false };
  for (const rid of ['req-1', 'req-2', 'req-3']) {
    await billing.admit(principal, ctxOf('x'), rid);
    billing.claim('ten_1', rid);
    await billing.finish({ principal, ctx: ctxOf('x'), requestId: rid, usage, startedAt: Date.now() });
  }
  return { j, billing };
}

describe('Billing', () => {
  /** The memory ledger's money, seen as the kind of store under test; `calls` records each settle. */
  const observed = (memory: Ledger, inProcess: boolean, calls: string[], settle?: Ledger['settle']): Ledger =>
    Object.assign(Object.create(memory) as Ledger, {
      inProcess,
      settle: (input: Parameters<Ledger['settle']>[0]) => {
        calls.push('settle');
        return (settle ?? ((i) => memory.settle(i)))(input);
      },
    });
  const usage = { promptTokens: 10, completionTokens: 5, totalTokens: 15, estimated: false };
  const funded = async () => {
    const memory = createMemoryLedger();
    await memory.adjustBalance('ten_1', 1_000_000, 'g', 'grant', Date.now());
    return memory;
  };

  it.each([
    ['a shared store: recorded before finish() returns, written to the store after the turn (the answer has left)', false, 1],
    ['an in-process ledger: nothing recorded (it dies with the process), written after the turn', true, 0],
  ] as const)('%s', async (_, inProcess, recorded) => {
    const memory = await funded();
    const calls: string[] = [];
    const j = journal();
    const billing = new Billing(observed(memory, inProcess, calls), cfg.billing, j, quiet);
    expect((await billing.admit(principal, ctxOf('a'), 'req-order')).ok).toBe(true);
    billing.claim('ten_1', 'req-order');
    const done = billing.finish({ principal, ctx: ctxOf('a'), requestId: 'req-order', usage, startedAt: Date.now() });
    calls.push('returned');
    expect(j.intended).toBe(recorded);
    await Promise.resolve(); // microtasks alone do not reach the settlement
    expect(calls).toEqual(['returned']);
    expect(billing.inFlight.finishing).toBe(1); // a stop waits for it either way
    await done;
    expect(calls).toEqual(['returned', 'settle']);
    expect(j.intended).toBe(0);
    const a = await memory.account('ten_1', '2026-11');
    expect(a.held).toBe(0);
    expect(a.balance).toBeLessThan(1_000_000);
  });

  it("a shared store's record is carried out once the settlement is written or can never be; it stays while neither the store nor the journal has it", async () => {
    // Written: carried out (the next start does not send it again).
    const memory = await funded();
    const written = journal();
    const ok = new Billing(observed(memory, false, []), cfg.billing, written, quiet);
    await ok.admit(principal, ctxOf('a'), 'req-written');
    ok.claim('ten_1', 'req-written');
    await ok.finish({ principal, ctx: ctxOf('a'), requestId: 'req-written', usage, startedAt: Date.now() });
    expect(written.intended).toBe(0);
    // A cost no ledger could take (out of range): nothing to retry, carried out; the hold released.
    const never = journal();
    const failures: string[] = [];
    const refused = new Billing(observed(memory, false, []), cfg.billing, never, { settled: () => {}, failed: (what) => failures.push(what) });
    await refused.admit(principal, ctxOf('b'), 'req-never');
    refused.claim('ten_1', 'req-never');
    const huge = { promptTokens: 10, completionTokens: Number.MAX_SAFE_INTEGER, totalTokens: Number.MAX_SAFE_INTEGER, estimated: false };
    await refused.finish({ principal, ctx: ctxOf('b'), requestId: 'req-never', usage: huge, startedAt: Date.now() });
    expect(failures).toContain('settle');
    expect(never.intended).toBe(0);
    expect((await memory.account('ten_1', '2026-11')).held).toBe(0);
    // The store unreachable and the journal unwritable: the record is all that is left of it.
    const kept = journal();
    kept.append = () => {
      throw new Error('disk full');
    };
    const down = new Billing(observed(memory, false, [], () => Promise.reject(new StoreUnavailableError(new Error('down')))), cfg.billing, kept, quiet);
    await down.admit(principal, ctxOf('c'), 'req-kept');
    down.claim('ten_1', 'req-kept');
    await down.finish({ principal, ctx: ctxOf('c'), requestId: 'req-kept', usage, startedAt: Date.now() });
    expect(kept.intended).toBe(1);
  });

  it('a shared store whose settlement cannot be recorded: written to the store before finish() returns', async () => {
    const memory = await funded();
    const calls: string[] = [];
    const failures: string[] = [];
    const j = journal();
    j.intend = () => {
      throw new Error('disk full');
    };
    const billing = new Billing(observed(memory, false, calls), cfg.billing, j, { settled: () => {}, failed: (what) => failures.push(what) });
    await billing.admit(principal, ctxOf('a'), 'req-now');
    billing.claim('ten_1', 'req-now');
    const done = billing.finish({ principal, ctx: ctxOf('a'), requestId: 'req-now', usage, startedAt: Date.now() });
    calls.push('returned');
    await done;
    expect(calls).toEqual(['settle', 'returned']);
    expect(failures).toEqual(['journal']);
    expect((await memory.account('ten_1', '2026-11')).held).toBe(0);
  });

  it('a process that dies between the answer and its settlement: the next start journals the record and the retry applies it once', async () => {
    const memory = await funded();
    const dir = mkdtempSync(join(journals, 'life-'));
    const path = join(dir, 'journal.jsonl');
    // First life: the store never answers the settlement (the process is about to die).
    const first = new SettlementJournal(path);
    const dying = new Billing(observed(memory, false, [], () => new Promise(() => {})), direct, first, quiet);
    await dying.admit(principal, ctxOf('a'), 'req-died');
    dying.claim('ten_1', 'req-died');
    void dying.finish({ principal, ctx: ctxOf('a'), requestId: 'req-died', usage, startedAt: Date.now() });
    await sleep(5);
    expect(first.intended).toBe(1);
    expect((await memory.account('ten_1', '2026-11')).held).toBeGreaterThan(0); // not settled
    // Next life, same journal path.
    const next = new SettlementJournal(path);
    expect(next.adoptIntents()).toEqual({ adopted: 1, unreadable: 0 });
    expect(next.pending().map((op) => (op.op === 'settle' ? op.input.requestId : op.requestId))).toEqual(['req-died']);
    expect(new SettlementJournal(path).adoptIntents()).toEqual({ adopted: 0, unreadable: 0 }); // the record was moved, not copied
    const calls: string[] = [];
    const billing = new Billing(observed(memory, false, calls), direct, next, quiet);
    expect(await billing.retryPending()).toBe(0);
    expect(await billing.retryPending()).toBe(0);
    expect(calls).toEqual(['settle']);
    const a = await memory.account('ten_1', '2026-11');
    expect(a.held).toBe(0);
    expect(a.balance).toBeLessThan(1_000_000);
    expect((await memory.usageRecords('ten_1', 10)).map((r) => r.requestId)).toEqual(['req-died']);
  });

  it('adopting: a line that is no whole record, or a cost no ledger could take, is counted and left out; no record, no journal file', () => {
    const path = join(mkdtempSync(join(journals, 'bad-')), 'journal.jsonl');
    const facts = {
      requestId: 'req-ok', tenantId: 'ten_1', keyId: null, startedAt: Date.now(), now: Date.now(), alias: 'svc-core', internalModel: 'core-model',
      promptTokens: 10, completionTokens: 5, totalTokens: 15, estimated: false, requestCount: 1,
      price: { inputPerMillion: 1, outputPerMillion: 1, perInput: 0 }, creditCheck: true, lease: null,
    };
    const first = new SettlementJournal(path);
    first.intend(facts);
    first.intend({ ...facts, requestId: 'req-ok-2' });
    first.intend({ ...facts, requestId: 'req-huge', promptTokens: Number.MAX_SAFE_INTEGER, price: { ...facts.price, inputPerMillion: 10_000_000 } });
    appendFileSync(`${path}.intents.0`, 'not a record\n');
    const next = new SettlementJournal(path);
    expect(next.adoptIntents()).toEqual({ adopted: 2, unreadable: 2 });
    expect(next.pending().map((op) => (op.op === 'settle' ? op.input.requestId : op.requestId))).toEqual(['req-ok', 'req-ok-2']);
    next.carriedOut(next.intend({ ...facts, requestId: 'req-next-life' }));
    next.close();
    expect(readdirSync(join(path, '..'))).toEqual(['journal.jsonl']); // adopted, and nothing of its own open
    const none = join(mkdtempSync(join(journals, 'none-')), 'journal.jsonl');
    expect(new SettlementJournal(none).adoptIntents()).toEqual({ adopted: 0, unreadable: 0 });
    expect(existsSync(none)).toBe(false);
  });

  it('the journal is private to the process owner (0600) however it is written', () => {
    const op = { op: 'release' as const, tenantId: 'ten_1', requestId: 'req-1' };
    const appended = join(mkdtempSync(join(journals, 'mode-')), 'journal.jsonl');
    new SettlementJournal(appended).append(op);
    const rewritten = join(mkdtempSync(join(journals, 'mode-')), 'journal.jsonl');
    new SettlementJournal(rewritten).rewrite([op]);
    const adopted = join(mkdtempSync(join(journals, 'mode-')), 'journal.jsonl');
    new SettlementJournal(adopted).intend({
      requestId: 'req-1', tenantId: 'ten_1', keyId: null, startedAt: 1, now: 1, alias: 'a', internalModel: 'm', promptTokens: 1, completionTokens: 1,
      totalTokens: 2, estimated: false, requestCount: 1, price: { inputPerMillion: 1, outputPerMillion: 1, perInput: 0 }, creditCheck: false, lease: null,
    });
    new SettlementJournal(adopted).adoptIntents();
    for (const path of [appended, rewritten, adopted]) expect(statSync(path).mode & 0o777).toBe(0o600);
  });

  it('a recorded settlement the store cannot take is journaled, and its record is then done', async () => {
    const memory = await funded();
    const j = journal();
    const billing = new Billing(observed(memory, false, [], () => Promise.reject(new StoreUnavailableError('down'))), direct, j, quiet);
    await billing.admit(principal, ctxOf('a'), 'req-down');
    billing.claim('ten_1', 'req-down');
    await billing.finish({ principal, ctx: ctxOf('a'), requestId: 'req-down', usage, startedAt: Date.now() });
    expect(j.intended).toBe(0);
    expect(j.pending()).toHaveLength(1);
  });

  it('an admitted request whose response processing never claims it is released after the grace period', async () => {
    const ledger = createMemoryLedger();
    await ledger.adjustBalance('ten_1', 1_000_000, 'g', 'grant', Date.now());
    const billing = new Billing(ledger, direct, journal(), quiet);
    expect((await billing.admit(principal, ctxOf('a'), 'req-left')).ok).toBe(true);
    expect((await billing.admit(principal, ctxOf('b'), 'req-claimed')).ok).toBe(true);
    expect(billing.claim('ten_1', 'req-claimed')).toBe(true); // placed here: a local claim
    const during = await ledger.account('ten_1', '2026-11');
    expect(during.held).toBeGreaterThan(0);
    await sleep(1300);
    const after = await ledger.account('ten_1', '2026-11');
    expect(after.held).toBeGreaterThan(0);
    expect(after.held).toBeLessThan(during.held); // only the unclaimed one went
    await billing.finish({ principal, ctx: ctxOf('b'), requestId: 'req-claimed', usage: { promptTokens: 10, completionTokens: 5, totalTokens: 15, estimated: false }, startedAt: Date.now() });
    expect((await ledger.account('ten_1', '2026-11')).held).toBe(0);
  });

  it('admitted by one instance, processed by another: the claim goes through the store and the hold stays', async () => {
    const ledger = createMemoryLedger();
    await ledger.adjustBalance('ten_1', 1_000_000, 'g', 'grant', Date.now());
    const authzSide = new Billing(ledger, cfg.billing, journal(), quiet);
    const procSide = new Billing(ledger, cfg.billing, journal(), quiet);
    expect((await authzSide.admit(principal, ctxOf('a'), 'req-x')).ok).toBe(true);
    const held = (await ledger.account('ten_1', '2026-11')).held;
    expect(procSide.claim('ten_1', 'req-x')).toBe(false); // not pending there: recorded in the store, taken over
    await sleep(1300); // authzSide's grace timer fires
    expect((await ledger.account('ten_1', '2026-11')).held).toBe(held);
  });

  it('a live exchange renews its hold; a dead instance\'s hold is released by another instance once its lease ran out', async () => {
    const ledger = createMemoryLedger();
    let t = Date.now();
    const clock = () => t;
    await ledger.adjustBalance('ten_1', 1_000_000, 'g', 'grant', t);
    const live = new Billing(ledger, cfg.billing, journal(), quiet, clock, 'inst-live');
    const dead = new Billing(ledger, cfg.billing, journal(), quiet, clock, 'inst-dead');
    expect((await live.admit(principal, ctxOf('a'), 'req-live')).ok).toBe(true);
    expect((await dead.admit(principal, ctxOf('b'), 'req-dead')).ok).toBe(true);
    live.claim('ten_1', 'req-live');
    dead.claim('ten_1', 'req-dead');
    const both = (await ledger.account('ten_1', '2026-11')).held;
    // `dead` never renews again (its process is gone); `live` renews every third of the lease for 6 leases.
    const step = (cfg.billing.holdLeaseSeconds * 1000) / 3;
    for (let i = 0; i < 18; i++) {
      t += step;
      await live.renewLeases();
      await live.reap();
    }
    expect((await ledger.account('ten_1', '2026-11')).held).toBe(both / 2);
    expect(live.inFlight).toEqual({ holds: 1, unclaimed: 0, finishing: 0 });
    await live.finish({ principal, ctx: ctxOf('a'), requestId: 'req-live', usage: { promptTokens: 10, completionTokens: 5, totalTokens: 15, estimated: false }, startedAt: t });
    expect(live.inFlight).toEqual({ holds: 0, unclaimed: 0, finishing: 0 });
    expect(await live.renewLeases()).toBe(0);
    const a = await ledger.account('ten_1', '2026-11');
    expect(a.held).toBe(0);
    expect(a.balance).toBeLessThan(1_000_000);
  });

  it('a stop releases at once the holds no response processing claimed, and waits for settlements under way', async () => {
    const ledger = createMemoryLedger();
    await ledger.adjustBalance('ten_1', 1_000_000, 'g', 'grant', Date.now());
    const billing = new Billing(ledger, cfg.billing, journal(), quiet);
    await billing.admit(principal, ctxOf('a'), 'req-never-claimed');
    await billing.admit(principal, ctxOf('b'), 'req-settling');
    billing.claim('ten_1', 'req-settling');
    expect(billing.inFlight).toEqual({ holds: 2, unclaimed: 1, finishing: 0 });
    void billing.finish({ principal, ctx: ctxOf('b'), requestId: 'req-settling', usage: null, startedAt: Date.now() });
    expect(billing.inFlight.finishing).toBe(1);
    await billing.releaseAllUnclaimed();
    await billing.settled();
    expect(billing.inFlight).toEqual({ holds: 0, unclaimed: 0, finishing: 0 });
    expect((await ledger.account('ten_1', '2026-11')).held).toBe(0);
  });

  it('a hold whose request never got a priced body (no context) is released, not left', async () => {
    const ledger = createMemoryLedger();
    await ledger.adjustBalance('ten_1', 1_000_000, 'g', 'grant', Date.now());
    const billing = new Billing(ledger, cfg.billing, journal(), quiet);
    await billing.admit(principal, ctxOf('a'), 'req-no-ctx');
    billing.claim('ten_1', 'req-no-ctx');
    await billing.finish({ principal, ctx: null, requestId: 'req-no-ctx', usage: null, startedAt: Date.now() });
    expect((await ledger.account('ten_1', '2026-11')).held).toBe(0);
  });

  it('402 with the top-up URL when the balance cannot cover the worst case; nothing held', async () => {
    const ledger = createMemoryLedger();
    const billing = new Billing(ledger, cfg.billing, journal(), quiet);
    const r = await billing.admit(principal, ctxOf('x'), 'req-1');
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.error.entry.code).toBe('insufficient_credit');
      expect(r.error.message).toContain(cfg.billing.topUpUrl);
    }
    expect((await ledger.account('ten_1', '2026-11')).held).toBe(0);
  });

  it('a retry round stops at the first operation the store is not taking, and keeps the rest in order', async () => {
    const real = createMemoryLedger();
    await real.adjustBalance('ten_1', 1_000_000, 'g', 'grant', Date.now());
    let down = true;
    let tries = 0;
    let refusedInput = false;
    const flaky: Ledger = {
      ...real,
      settle: (i) => {
        tries++;
        if (refusedInput && i.requestId === 'req-2') return Promise.reject(new RangeError('not a figure the ledger takes'));
        return down ? Promise.reject(new StoreUnavailableError()) : real.settle(i);
      },
    };
    const { j, billing } = await threeJournaled(flaky);
    expect(j.pending().map((op) => (op.op === 'settle' ? op.input.requestId : op.requestId))).toEqual(['req-1', 'req-2', 'req-3']);
    tries = 0;
    expect(await billing.retryPending()).toBe(3);
    expect(tries).toBe(1); // one try for the round, not one per operation
    expect(j.pending().map((op) => (op.op === 'settle' ? op.input.requestId : op.requestId))).toEqual(['req-1', 'req-2', 'req-3']);
    // Any other failure keeps that operation and goes on with the next.
    down = false;
    refusedInput = true;
    tries = 0;
    expect(await billing.retryPending()).toBe(1);
    expect(tries).toBe(3);
    expect(j.pending().map((op) => (op.op === 'settle' ? op.input.requestId : op.requestId))).toEqual(['req-2']);
    expect((await real.usageRecords('ten_1', 10)).map((r) => r.requestId).sort()).toEqual(['req-1', 'req-3']);
  });

  it('a retry round goes on past settlements written but short of replicas (each is written on the master), and keeps them', async () => {
    const real = createMemoryLedger();
    await real.adjustBalance('ten_1', 1_000_000, 'g', 'grant', Date.now());
    let replicas = 0;
    let tries = 0;
    const unreplicated: Ledger = {
      ...real,
      settle: async (i) => {
        tries++;
        const r = await real.settle(i); // written on the master whatever the replicas do
        if (replicas === 0) throw new NotReplicatedError();
        return r;
      },
    };
    const { j, billing } = await threeJournaled(unreplicated);
    expect(j.pending()).toHaveLength(3);
    tries = 0;
    expect(await billing.retryPending()).toBe(3);
    expect(tries).toBe(3); // every one tried: the round did not stop
    replicas = 1;
    expect(await billing.retryPending()).toBe(0);
    expect((await real.usageRecords('ten_1', 10)).map((r) => r.requestId).sort()).toEqual(['req-1', 'req-2', 'req-3']); // each booked once
    expect((await real.account('ten_1', '2026-11')).held).toBe(0);
  });

  it('a settlement the store refuses is journaled, retried until applied, and applied once', async () => {
    const real = createMemoryLedger();
    await real.adjustBalance('ten_1', 1_000_000, 'g', 'grant', Date.now());
    let down = false;
    const flaky: Ledger = {
      ...real,
      settle: (i) => (down ? Promise.reject(new StoreUnavailableError()) : real.settle(i)),
      release: (t, r) => (down ? Promise.reject(new StoreUnavailableError()) : real.release(t, r)),
    };
    const j = journal();
    const billing = new Billing(flaky, direct, j, quiet);
    await billing.admit(principal, ctxOf('x'), 'req-1');
    billing.claim('ten_1', 'req-1');
    down = true;
    const usage = { promptTokens: 10, completionTokens: 5, totalTokens: 15, estimated: false };
    await billing.finish({ principal, ctx: ctxOf('x'), requestId: 'req-1', usage, startedAt: Date.now() });
    await billing.finish({ principal, ctx: ctxOf('x'), requestId: 'req-1', usage, startedAt: Date.now() }); // a duplicate
    expect(j.pending()).toHaveLength(2);
    expect(await billing.retryPending()).toBe(2); // still down: kept
    down = false;
    expect(await billing.retryPending()).toBe(0);
    expect(j.pending()).toHaveLength(0);
    const records = await real.usageRecords('ten_1', 10);
    expect(records).toHaveLength(1); // applied once
    const a = await real.account('ten_1', '2026-11');
    expect(a.held).toBe(0);
    expect(1_000_000 - a.balance).toBe(records[0]!.cost);
  });

  it('settlements journaled while a retry waits on a slow store stay pending and are applied by the next retry', async () => {
    const real = createMemoryLedger();
    await real.adjustBalance('ten_1', 1_000_000, 'g', 'grant', Date.now());
    const unreachable = new Set(['req-1', 'req-2', 'req-3']);
    let slow: { reached: () => void; go: Promise<void> } | null = null;
    const flaky: Ledger = {
      ...real,
      settle: async (i) => {
        if (unreachable.has(i.requestId)) throw new StoreUnavailableError();
        if (slow) {
          slow.reached();
          await slow.go;
        }
        return real.settle(i);
      },
      release: (t, r) => (unreachable.has(r) ? Promise.reject(new StoreUnavailableError()) : real.release(t, r)),
    };
    const j = journal();
    const billing = new Billing(flaky, direct, j, quiet);
    const usage = { promptTokens: 10, completionTokens: 5, totalTokens: 15, estimated: false };
    const finish = (requestId: string, u: typeof usage | null) => billing.finish({ principal, ctx: ctxOf('x'), requestId, usage: u, startedAt: Date.now() });
    for (const id of ['req-1', 'req-2', 'req-3']) {
      await billing.admit(principal, ctxOf('x'), id);
      billing.claim('ten_1', id);
    }
    await finish('req-1', usage);
    expect(j.pending()).toHaveLength(1);

    // The store is back but slow: the retry of req-1 is under way when req-2 and req-3 are journaled.
    unreachable.delete('req-1');
    let go!: () => void;
    const reached = new Promise<void>((resolve) => {
      slow = { reached: resolve, go: new Promise<void>((r) => (go = r)) };
    });
    const retry = billing.retryPending();
    await reached;
    await finish('req-2', usage);
    await finish('req-3', null); // nothing delivered: a release
    expect(j.pending()).toHaveLength(3);
    go();
    expect(await retry).toBe(2);
    expect(j.pending()).toEqual([
      { op: 'settle', input: expect.objectContaining({ requestId: 'req-2' }) },
      { op: 'release', tenantId: 'ten_1', requestId: 'req-3' },
    ]);
    expect((await real.usageRecords('ten_1', 10)).map((r) => r.requestId)).toEqual(['req-1']);

    slow = null;
    unreachable.clear();
    expect(await billing.retryPending()).toBe(0);
    expect(j.pending()).toHaveLength(0);
    expect((await real.usageRecords('ten_1', 10)).map((r) => r.requestId).sort()).toEqual(['req-1', 'req-2']);
    expect((await real.account('ten_1', '2026-11')).held).toBe(0);
  });

  it('a settlement no ledger could take (a cost out of range) never throws, releases the hold and journals nothing', async () => {
    const ledger = createMemoryLedger();
    await ledger.adjustBalance('ten_1', 1_000_000, 'g', 'grant', Date.now());
    const failures: string[] = [];
    const j = journal();
    const billing = new Billing(ledger, cfg.billing, j, { settled: () => {}, failed: (what) => failures.push(what) });
    await billing.admit(principal, ctxOf('x'), 'req-big');
    billing.claim('ten_1', 'req-big');
    const absurd = { promptTokens: Number.MAX_SAFE_INTEGER, completionTokens: Number.MAX_SAFE_INTEGER, totalTokens: Number.MAX_SAFE_INTEGER, estimated: false };
    await expect(billing.finish({ principal, ctx: ctxOf('x'), requestId: 'req-big', usage: absurd, startedAt: Date.now() })).resolves.toBeUndefined();
    expect(failures).toEqual(['settle']);
    expect(j.pending()).toHaveLength(0);
    const a = await ledger.account('ten_1', '2026-11');
    expect(a).toMatchObject({ held: 0, balance: 1_000_000 });
  });

  it('a store outage at admission is 503 credits_unavailable and journals a release of any late hold', async () => {
    const real = createMemoryLedger();
    const down: Ledger = { ...real, reserve: () => Promise.reject(new StoreUnavailableError()) };
    const j = journal();
    const r = await new Billing(down, cfg.billing, j, quiet).admit(principal, ctxOf('x'), 'req-9');
    expect(!r.ok && r.error.entry.code).toBe('credits_unavailable');
    expect(j.pending()).toEqual([{ op: 'release', tenantId: 'ten_1', requestId: 'req-9' }]);
  });
});
