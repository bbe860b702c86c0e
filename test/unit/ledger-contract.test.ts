/**
 * One contract suite for every Ledger implementation (memory and Redis):
 * reserve (replay, throttling, spend cap, credit check, refusals leave no
 * trace), settle (idempotent, capped at the hold, credit-limited without a
 * hold), release, reaping, balance adjustments, the ledger and usage records,
 * usage by day, copies, validation, close, concurrency, and the money
 * invariant as a fast-check property.
 *
 * The Redis run starts its own redis-server through the harness (never the
 * shared one on 6379) and gives every ledger a fresh prefix instead of flushing.
 */
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { Socket } from 'node:net';
import { Writable } from 'node:stream';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { NotReplicatedError, StoreUnavailableError } from '../../sidecar/src/store/contract.js';
import {
  type Ledger,
  type LeaseInput,
  type LedgerEntry,
  type MoveInput,
  type RateLimits,
  type ReserveInput,
  type ReserveOutcome,
  type SettleInput,
  type SettleOutcome,
  type UsageDay,
  type UsageRecord,
  InsufficientBalanceError,
  LEASE_BLOCK_MS,
} from '../../sidecar/src/store/ledger-contract.js';
import { createMemoryLedger } from '../../sidecar/src/store/memory-ledger.js';
import { createRedisLedger } from '../../sidecar/src/store/redis-ledger.js';
import { type RedisServer, startRedis } from '../harness/redis.js';
import { type RedisCluster, startRedisCluster } from '../harness/redis-cluster.js';

// ---------------------------------------------------------------- fixtures

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

const T = 'ten_a';
const PERIOD = '2026-11';
const DAY = '2026-11-03';
const NOW = Date.UTC(2026, 10, 3, 12, 0, 0);
const MINUTE = Math.floor(NOW / 60_000);
/** A range covering every day the tests use (kept short: an implementation may visit each day). */
const ALL_DAYS = ['2026-10-01', '2026-12-31'] as const;

let seq = 0;

/** The ledger entry of an adjustment result (what ledger() lists: no `replayed`). */
function entryOf({ replayed: _replayed, ...entry }: LedgerEntry & { readonly replayed: boolean }): LedgerEntry {
  return entry;
}

function rid(): string {
  seq += 1;
  return `req_${seq}`;
}

function reserveInput(requestId: string, over: Partial<ReserveInput> = {}): ReserveInput {
  return {
    tenantId: T,
    requestId,
    keyId: 'key_1',
    amount: 100,
    tokens: 10,
    creditCheck: true,
    period: PERIOD,
    minute: MINUTE,
    limits: null,
    holdTtlSeconds: 60,
    now: NOW,
    ...over,
  };
}

function usage(requestId: string, over: Partial<Omit<UsageRecord, 'cost'>> = {}): Omit<UsageRecord, 'cost'> {
  return {
    time: new Date(NOW).toISOString(),
    tenantId: T,
    keyId: 'key_1',
    alias: 'chat-small',
    internalModel: 'provider/model-small',
    promptTokens: 12,
    completionTokens: 30,
    totalTokens: 42,
    requestCount: 1,
    requestId,
    estimated: false,
    ...over,
  };
}

function settleInput(
  requestId: string,
  charge: number,
  over: Partial<Omit<SettleInput, 'usage'>> & { usage?: Partial<Omit<UsageRecord, 'cost'>> } = {},
): SettleInput {
  const { usage: usageOver, ...rest } = over;
  const tenantId = rest.tenantId ?? T;
  return {
    tenantId,
    requestId,
    charge,
    creditCheck: true,
    period: PERIOD,
    day: DAY,
    now: NOW + 1_000,
    ...rest,
    usage: usage(requestId, { tenantId, ...usageOver }),
  };
}

function leaseInput(leaseId: string, over: Partial<LeaseInput> = {}): LeaseInput {
  return {
    tenantId: T,
    leaseId,
    amount: 1_000,
    minimum: 10,
    headroom: 4,
    creditCheck: true,
    period: PERIOD,
    holdTtlSeconds: 120,
    leaseSeconds: 30,
    owner: 'gw_1',
    now: NOW,
    ...over,
  };
}

function moveInput(leaseId: string, requestId: string, amount: number, over: Partial<MoveInput> = {}): MoveInput {
  return {
    tenantId: T,
    leaseId,
    requestId,
    keyId: 'key_1',
    amount,
    period: PERIOD,
    holdTtlSeconds: 60,
    leaseSeconds: 15,
    owner: 'gw_1',
    now: NOW,
    ...over,
  };
}

const OK: ReserveOutcome = { ok: true, replay: false };
const REPLAY: ReserveOutcome = { ok: true, replay: true };

function refused(reason: 'insufficient_credit' | 'spend_cap_exceeded' | 'rate_limit_exceeded'): ReserveOutcome {
  return { ok: false, reason };
}

function settled(applied: boolean, charged: number, uncovered: number): SettleOutcome {
  return { applied, charged, uncovered };
}

function limits(over: Partial<RateLimits> = {}): RateLimits {
  return { requestsPerMinute: null, tokensPerMinute: null, scopeId: 'key_1', ...over };
}

function uniquePrefix(): string {
  return `t${randomBytes(6).toString('hex')}`;
}

let grantSeq = 0;

async function grant(ledger: Ledger, amount: number, tenantId = T): Promise<LedgerEntry> {
  grantSeq += 1;
  return ledger.adjustBalance(tenantId, amount, `grant_${grantSeq}`, 'test grant', NOW);
}

/** Everything observable about one tenant (plus the reaper's tenant list). */
async function snapshot(ledger: Ledger, tenantId = T, period = PERIOD) {
  return {
    account: await ledger.account(tenantId, period),
    ledger: await ledger.ledger(tenantId, 10_000),
    usage: await ledger.usageRecords(tenantId, 10_000),
    byDay: await ledger.usageByDay(tenantId, ...ALL_DAYS),
    tenantsWithHolds: await ledger.tenantsWithHolds(),
  };
}

// ---------------------------------------------------------------- contract

export interface LedgerContractOptions {
  /** fast-check runs of the money-invariant property. */
  readonly propertyRuns?: number;
}

export function describeLedgerContract(
  name: string,
  make: () => Ledger | Promise<Ledger>,
  options: LedgerContractOptions = {},
): void {
  describe(`Ledger contract: ${name}`, () => {
    let ledger: Ledger;

    beforeEach(async () => {
      ledger = await make();
    });
    afterEach(async () => {
      await ledger.close();
    });

    // ------------------------------------------------------------ account

    it('an unknown tenant has zero balance, nothing held, no cap, nothing spent', async () => {
      expect(await ledger.account('ten_unknown', PERIOD)).toStrictEqual({
        balance: 0,
        held: 0,
        leased: 0,
        cap: null,
        spent: 0,
      });
      expect(await ledger.ledger('ten_unknown', 10)).toEqual([]);
      expect(await ledger.usageRecords('ten_unknown', 10)).toEqual([]);
      expect(await ledger.usageByDay('ten_unknown', ...ALL_DAYS)).toEqual([]);
      expect(await ledger.tenantsWithHolds()).toEqual([]);
    });

    it('keeps tenants apart', async () => {
      await grant(ledger, 1_000, 'ten_a');
      expect((await ledger.account('ten_b', PERIOD)).balance).toBe(0);
      expect(await ledger.reserve(reserveInput(rid(), { tenantId: 'ten_b' }))).toEqual(
        refused('insufficient_credit'),
      );
      const r = rid();
      expect(await ledger.reserve(reserveInput(r, { tenantId: 'ten_a' }))).toEqual(OK);
      // The same request id in another tenant is a different hold.
      await grant(ledger, 1_000, 'ten_b');
      expect(await ledger.reserve(reserveInput(r, { tenantId: 'ten_b', amount: 50 }))).toEqual(OK);
      expect(await ledger.account('ten_a', PERIOD)).toMatchObject({ balance: 1_000, held: 100 });
      expect(await ledger.account('ten_b', PERIOD)).toMatchObject({ balance: 1_000, held: 50 });
      expect(await ledger.ledger('ten_b', 10)).toHaveLength(1);
    });

    // ------------------------------------------------------------ reserve

    it('reserves: holds the amount without touching the balance', async () => {
      await grant(ledger, 1_000);
      expect(await ledger.reserve(reserveInput(rid(), { amount: 300 }))).toStrictEqual(OK);
      expect(await ledger.reserve(reserveInput(rid(), { amount: 200 }))).toStrictEqual(OK);
      expect(await ledger.account(T, PERIOD)).toStrictEqual({ balance: 1_000, held: 500, leased: 0, cap: null, spent: 0 });
      expect(await ledger.tenantsWithHolds()).toEqual([T]);
      expect(await ledger.ledger(T, 10)).toHaveLength(1); // only the grant
    });

    it('a second reserve with the same id (any state) is a replay and changes nothing', async () => {
      await grant(ledger, 1_000);
      const a = rid();
      await ledger.reserve(reserveInput(a, { amount: 300 }));
      const before = await snapshot(ledger);
      expect(await ledger.reserve(reserveInput(a, { amount: 300 }))).toStrictEqual(REPLAY);
      // Even a different amount, or one the credit would refuse.
      expect(await ledger.reserve(reserveInput(a, { amount: 5_000 }))).toStrictEqual(REPLAY);
      expect(await snapshot(ledger)).toEqual(before);

      const released = rid();
      await ledger.reserve(reserveInput(released, { amount: 100 }));
      await ledger.release(T, released);
      const done = rid();
      await ledger.reserve(reserveInput(done, { amount: 100 }));
      await ledger.settle(settleInput(done, 40));
      const after = await snapshot(ledger);
      expect(await ledger.reserve(reserveInput(released))).toStrictEqual(REPLAY);
      expect(await ledger.reserve(reserveInput(done))).toStrictEqual(REPLAY);
      expect(await snapshot(ledger)).toEqual(after);
    });

    it('credit check on: refuses when balance - held is below the amount', async () => {
      await grant(ledger, 1_000);
      expect(await ledger.reserve(reserveInput(rid(), { amount: 600 }))).toEqual(OK);
      expect(await ledger.reserve(reserveInput(rid(), { amount: 500 }))).toEqual(
        refused('insufficient_credit'),
      );
      expect(await ledger.reserve(reserveInput(rid(), { amount: 400 }))).toEqual(OK);
      expect(await ledger.reserve(reserveInput(rid(), { amount: 1 }))).toEqual(refused('insufficient_credit'));
      expect(await ledger.reserve(reserveInput(rid(), { amount: 0 }))).toEqual(OK);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 1_000, held: 1_000 });
    });

    it('credit check off: reserves beyond the balance', async () => {
      expect(await ledger.reserve(reserveInput(rid(), { amount: 500, creditCheck: false }))).toEqual(OK);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 0, held: 500 });
    });

    it('a refused reserve leaves no trace; a later reserve with the same id can succeed', async () => {
      const a = rid();
      const before = await snapshot(ledger);
      expect(await ledger.reserve(reserveInput(a, { amount: 100 }))).toEqual(refused('insufficient_credit'));
      expect(await snapshot(ledger)).toEqual(before);
      await grant(ledger, 100);
      expect(await ledger.reserve(reserveInput(a, { amount: 100 }))).toEqual(OK);

      await ledger.setCap(T, 150);
      const b = rid();
      const beforeCap = await snapshot(ledger);
      expect(await ledger.reserve(reserveInput(b, { amount: 100, creditCheck: false }))).toEqual(
        refused('spend_cap_exceeded'),
      );
      expect(await snapshot(ledger)).toEqual(beforeCap);
      await ledger.setCap(T, null);
      expect(await ledger.reserve(reserveInput(b, { amount: 100, creditCheck: false }))).toEqual(OK);

      const c = rid();
      const rl = limits({ requestsPerMinute: 0 });
      const beforeRate = await snapshot(ledger);
      expect(await ledger.reserve(reserveInput(c, { amount: 0, limits: rl }))).toEqual(
        refused('rate_limit_exceeded'),
      );
      expect(await snapshot(ledger)).toEqual(beforeRate);
      expect(await ledger.reserve(reserveInput(c, { amount: 0, limits: null, creditCheck: false }))).toEqual(
        OK,
      );
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 100, held: 200 });
    });

    it('checks throttling, then the spend cap, then credit', async () => {
      await ledger.setCap(T, 10);
      const rl = limits({ requestsPerMinute: 0 });
      expect(await ledger.reserve(reserveInput(rid(), { amount: 20, limits: rl }))).toEqual(
        refused('rate_limit_exceeded'),
      );
      expect(await ledger.reserve(reserveInput(rid(), { amount: 20 }))).toEqual(refused('spend_cap_exceeded'));
      expect(await ledger.reserve(reserveInput(rid(), { amount: 5 }))).toEqual(refused('insufficient_credit'));
    });

    // ------------------------------------------------------------ throttling

    it('throttles requests per minute, per scope and per tenant', async () => {
      const rl = limits({ requestsPerMinute: 2, scopeId: 'key_1' });
      const go = (over: Partial<ReserveInput> = {}) =>
        ledger.reserve(reserveInput(rid(), { amount: 0, limits: rl, ...over }));
      expect(await go()).toEqual(OK);
      expect(await go()).toEqual(OK);
      expect(await go()).toEqual(refused('rate_limit_exceeded'));
      expect(await go({ minute: MINUTE + 1 })).toEqual(OK);
      expect(await go({ limits: { ...rl, scopeId: 'key_2' } })).toEqual(OK);
      expect(await go({ tenantId: 'ten_b' })).toEqual(OK);
      expect(await go()).toEqual(refused('rate_limit_exceeded'));
    });

    it('throttles tokens per minute', async () => {
      const rl = limits({ tokensPerMinute: 100 });
      const go = (tokens: number, over: Partial<ReserveInput> = {}) =>
        ledger.reserve(reserveInput(rid(), { amount: 0, tokens, limits: rl, ...over }));
      expect(await go(60)).toEqual(OK);
      expect(await go(50)).toEqual(refused('rate_limit_exceeded'));
      expect(await go(40)).toEqual(OK);
      expect(await go(1)).toEqual(refused('rate_limit_exceeded'));
      expect(await go(0)).toEqual(OK);
      expect(await go(100, { minute: MINUTE + 1 })).toEqual(OK);
      expect(await go(101, { minute: MINUTE + 2 })).toEqual(refused('rate_limit_exceeded'));
    });

    it('refused and replayed reserves do not count against the limits', async () => {
      await grant(ledger, 100);
      await ledger.setCap(T, 1_000);
      const rl = limits({ requestsPerMinute: 1, tokensPerMinute: 100 });
      const go = (requestId: string, over: Partial<ReserveInput> = {}) =>
        ledger.reserve(reserveInput(requestId, { amount: 10, tokens: 10, limits: rl, ...over }));
      expect(await go(rid(), { tokens: 101 })).toEqual(refused('rate_limit_exceeded'));
      expect(await go(rid(), { amount: 1_001, creditCheck: false })).toEqual(refused('spend_cap_exceeded'));
      expect(await go(rid(), { amount: 101 })).toEqual(refused('insufficient_credit'));
      const a = rid();
      expect(await go(a, { tokens: 100 })).toEqual(OK);
      expect(await go(a, { tokens: 100 })).toEqual(REPLAY);
      expect(await go(rid(), { tokens: 0 })).toEqual(refused('rate_limit_exceeded'));
    });

    it('a null limit is unlimited and its counter does not move', async () => {
      const unlimited = limits();
      for (let i = 0; i < 5; i++) {
        const input = reserveInput(rid(), { amount: 0, tokens: 1_000, limits: unlimited });
        expect(await ledger.reserve(input)).toEqual(OK);
      }
      const strict = limits({ requestsPerMinute: 1, tokensPerMinute: 10 });
      expect(await ledger.reserve(reserveInput(rid(), { amount: 0, tokens: 10, limits: strict }))).toEqual(OK);
      expect(await ledger.reserve(reserveInput(rid(), { amount: 0, tokens: 0, limits: strict }))).toEqual(
        refused('rate_limit_exceeded'),
      );
      // Only the tokens limit: the requests counter is not needed, tokens still count.
      const tokensOnly = limits({ tokensPerMinute: 10, scopeId: 'key_9' });
      expect(await ledger.reserve(reserveInput(rid(), { amount: 0, tokens: 10, limits: tokensOnly }))).toEqual(
        OK,
      );
      expect(await ledger.reserve(reserveInput(rid(), { amount: 0, tokens: 1, limits: tokensOnly }))).toEqual(
        refused('rate_limit_exceeded'),
      );
    });

    // ------------------------------------------------------------ spend cap

    it('spend cap counts spent in the period plus everything held', async () => {
      await grant(ledger, 10_000);
      await ledger.setCap(T, 1_000);
      expect((await ledger.account(T, PERIOD)).cap).toBe(1_000);
      const a = rid();
      const c = rid();
      expect(await ledger.reserve(reserveInput(a, { amount: 600 }))).toEqual(OK);
      expect(await ledger.reserve(reserveInput(rid(), { amount: 500 }))).toEqual(refused('spend_cap_exceeded'));
      expect(await ledger.reserve(reserveInput(c, { amount: 400 }))).toEqual(OK);
      expect(await ledger.release(T, c)).toBe(true);
      expect(await ledger.settle(settleInput(a, 300))).toEqual(settled(true, 300, 0));
      expect(await ledger.account(T, PERIOD)).toStrictEqual(
        { balance: 9_700, held: 0, leased: 0, cap: 1_000, spent: 300 },
      );
      const d = rid();
      expect(await ledger.reserve(reserveInput(d, { amount: 700 }))).toEqual(OK);
      expect(await ledger.reserve(reserveInput(rid(), { amount: 1 }))).toEqual(refused('spend_cap_exceeded'));
      // Another period: nothing spent there yet, but holds still count.
      const next = '2026-12';
      expect(await ledger.reserve(reserveInput(rid(), { amount: 300, period: next }))).toEqual(OK);
      expect(await ledger.reserve(reserveInput(rid(), { amount: 1, period: next }))).toEqual(
        refused('spend_cap_exceeded'),
      );
      expect(await ledger.account(T, next)).toStrictEqual(
        { balance: 9_700, held: 1_000, leased: 0, cap: 1_000, spent: 0 },
      );

      await ledger.setCap(T, null);
      expect((await ledger.account(T, PERIOD)).cap).toBeNull();
      expect(await ledger.reserve(reserveInput(rid(), { amount: 5_000 }))).toEqual(OK);
    });

    it('a cap of zero refuses any positive amount', async () => {
      await grant(ledger, 1_000);
      await ledger.setCap(T, 0);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ cap: 0 });
      expect(await ledger.reserve(reserveInput(rid(), { amount: 1 }))).toEqual(refused('spend_cap_exceeded'));
    });

    // ------------------------------------------------------------ settle

    it('settles a hold: charges the balance, writes the ledger, usage and usage by day', async () => {
      await grant(ledger, 1_000);
      const a = rid();
      await ledger.reserve(reserveInput(a, { amount: 500 }));
      const input = settleInput(a, 300);
      expect(await ledger.settle(input)).toStrictEqual(settled(true, 300, 0));
      expect(await ledger.account(T, PERIOD)).toStrictEqual({ balance: 700, held: 0, leased: 0, cap: null, spent: 300 });
      expect(await ledger.tenantsWithHolds()).toEqual([]);
      const [charge, granted] = await ledger.ledger(T, 10);
      expect(granted).toMatchObject({ type: 'grant', amount: 1_000, balanceAfter: 1_000 });
      expect(charge).toStrictEqual({
        id: charge!.id,
        time: new Date(NOW + 1_000).toISOString(),
        type: 'charge',
        amount: -300,
        balanceAfter: 700,
        requestId: a,
        reason: null,
      });
      expect(charge!.id).not.toBe(granted!.id);
      expect(await ledger.usageRecords(T, 10)).toStrictEqual([{ ...input.usage, cost: 300 }]);
      expect(await ledger.usageByDay(T, DAY, DAY)).toStrictEqual([
        { day: DAY, alias: 'chat-small', promptTokens: 12, completionTokens: 30, requests: 1, cost: 300 },
      ]);
    });

    it('settle is idempotent: a second settle (other charge) changes nothing', async () => {
      await grant(ledger, 1_000);
      const a = rid();
      await ledger.reserve(reserveInput(a, { amount: 500 }));
      expect(await ledger.settle(settleInput(a, 300))).toStrictEqual(settled(true, 300, 0));
      const before = await snapshot(ledger);
      expect(await ledger.settle(settleInput(a, 450))).toStrictEqual(settled(false, 300, 0));
      expect(await ledger.settle(settleInput(a, 300, { creditCheck: false }))).toStrictEqual(
        settled(false, 300, 0),
      );
      expect(await snapshot(ledger)).toEqual(before);
      expect(await ledger.release(T, a)).toBe(false);
      expect(await snapshot(ledger)).toEqual(before);
    });

    it('together: settlements issued inside it each get their own outcome, a replay among them included', async () => {
      await grant(ledger, 1_000);
      const ids = [rid(), rid(), rid()];
      for (const id of ids) await ledger.reserve(reserveInput(id, { amount: 200 }));
      const outcomes: Promise<SettleOutcome>[] = [];
      const issue = () => {
        for (const id of ids) outcomes.push(ledger.settle(settleInput(id, 100)));
        outcomes.push(ledger.settle(settleInput(ids[0]!, 150)));
      };
      if (ledger.together) ledger.together(issue);
      else issue();
      expect(await Promise.all(outcomes)).toStrictEqual([settled(true, 100, 0), settled(true, 100, 0), settled(true, 100, 0), settled(false, 100, 0)]);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 700, held: 0, spent: 300 });
    });

    it('takes at most the hold; the rest is uncovered', async () => {
      await grant(ledger, 1_000);
      const a = rid();
      await ledger.reserve(reserveInput(a, { amount: 200 }));
      expect(await ledger.settle(settleInput(a, 350))).toStrictEqual(settled(true, 200, 150));
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 800, held: 0, spent: 200 });
      expect((await ledger.usageRecords(T, 1))[0]?.cost).toBe(200);
      const b = rid();
      await ledger.reserve(reserveInput(b, { amount: 200 }));
      expect(await ledger.settle(settleInput(b, 200))).toStrictEqual(settled(true, 200, 0));
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 600, held: 0, spent: 400 });
    });

    it('a hold settled with credit check off can take the balance negative', async () => {
      const a = rid();
      await ledger.reserve(reserveInput(a, { amount: 500, creditCheck: false }));
      expect(await ledger.settle(settleInput(a, 800, { creditCheck: false }))).toStrictEqual(
        settled(true, 500, 300),
      );
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: -500, held: 0, spent: 500 });
      // Without any hold and credit check off, the whole charge is taken.
      expect(await ledger.settle(settleInput(rid(), 200, { creditCheck: false }))).toStrictEqual(
        settled(true, 200, 0),
      );
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: -700, held: 0, spent: 700 });
      expect((await ledger.ledger(T, 1))[0]).toMatchObject({
        type: 'charge',
        amount: -200,
        balanceAfter: -700,
      });
      // With the credit check on, nothing more is available: nothing is taken.
      expect(await ledger.settle(settleInput(rid(), 150))).toStrictEqual(settled(true, 0, 150));
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: -700, spent: 700 });
    });

    it('settle after release (credit check on) is limited to the available balance', async () => {
      await grant(ledger, 500);
      const a = rid();
      await ledger.reserve(reserveInput(a, { amount: 300 }));
      expect(await ledger.release(T, a)).toBe(true);
      await ledger.reserve(reserveInput(rid(), { amount: 100 }));
      expect(await ledger.settle(settleInput(a, 1_000))).toStrictEqual(settled(true, 400, 600));
      expect(await ledger.account(T, PERIOD)).toStrictEqual({ balance: 100, held: 100, leased: 0, cap: null, spent: 400 });
      // Within the available balance it is taken in full.
      await grant(ledger, 1_000);
      const b = rid();
      await ledger.reserve(reserveInput(b, { amount: 50 }));
      await ledger.release(T, b);
      expect(await ledger.settle(settleInput(b, 250))).toStrictEqual(settled(true, 250, 0));
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 850, held: 100, spent: 650 });
    });

    it('settle without any hold: credit-limited; records usage; later reserve is a replay', async () => {
      const a = rid();
      const before = await ledger.ledger(T, 10);
      expect(await ledger.settle(settleInput(a, 120))).toStrictEqual(settled(true, 0, 120));
      expect(await ledger.ledger(T, 10)).toEqual(before); // no money moved: no ledger entry
      expect(await ledger.usageRecords(T, 10)).toStrictEqual([{ ...usage(a), cost: 0 }]);
      expect(await ledger.usageByDay(T, DAY, DAY)).toStrictEqual([
        { day: DAY, alias: 'chat-small', promptTokens: 12, completionTokens: 30, requests: 1, cost: 0 },
      ]);
      expect(await ledger.account(T, PERIOD)).toStrictEqual({ balance: 0, held: 0, leased: 0, cap: null, spent: 0 });
      expect(await ledger.reserve(reserveInput(a, { amount: 0 }))).toEqual(REPLAY);
      expect(await ledger.settle(settleInput(a, 50))).toStrictEqual(settled(false, 0, 0));
      expect(await ledger.usageRecords(T, 10)).toHaveLength(1);
    });

    it('a zero charge closes the hold and records usage, without a ledger entry', async () => {
      await grant(ledger, 1_000);
      const a = rid();
      await ledger.reserve(reserveInput(a, { amount: 400 }));
      expect(await ledger.settle(settleInput(a, 0))).toStrictEqual(settled(true, 0, 0));
      expect(await ledger.account(T, PERIOD)).toStrictEqual({ balance: 1_000, held: 0, leased: 0, cap: null, spent: 0 });
      expect(await ledger.ledger(T, 10)).toHaveLength(1); // the grant only
      expect(await ledger.usageRecords(T, 10)).toHaveLength(1);
      expect(await ledger.release(T, a)).toBe(false);
    });

    it('an expired hold not yet reaped still covers its settle', async () => {
      await grant(ledger, 1_000);
      const a = rid();
      await ledger.reserve(reserveInput(a, { amount: 300, holdTtlSeconds: 1 }));
      expect(await ledger.settle(settleInput(a, 500, { now: NOW + 5_000 }))).toStrictEqual(
        settled(true, 300, 200),
      );
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 700, held: 0 });
      expect(await ledger.reapExpired(T, NOW + 10_000)).toBe(0);
    });

    // ------------------------------------------------------------ release and reaping

    it('release gives the hold back once; false when there is no open hold', async () => {
      await grant(ledger, 1_000);
      const a = rid();
      await ledger.reserve(reserveInput(a, { amount: 400 }));
      expect(await ledger.release(T, a)).toBe(true);
      expect(await ledger.account(T, PERIOD)).toStrictEqual({ balance: 1_000, held: 0, leased: 0, cap: null, spent: 0 });
      expect(await ledger.tenantsWithHolds()).toEqual([]);
      const before = await snapshot(ledger);
      expect(await ledger.release(T, a)).toBe(false);
      expect(await ledger.release(T, 'req_unknown')).toBe(false);
      expect(await ledger.release('ten_unknown', a)).toBe(false);
      expect(await snapshot(ledger)).toEqual(before);
      expect(await ledger.ledger(T, 10)).toHaveLength(1);
    });

    it('claim protects a hold from releaseUnclaimed; an unclaimed hold is released once', async () => {
      await grant(ledger, 1_000);
      const claimed = rid();
      const left = rid();
      await ledger.reserve(reserveInput(claimed, { amount: 300 }));
      await ledger.reserve(reserveInput(left, { amount: 200 }));
      await ledger.claim(T, claimed);
      expect(await ledger.releaseUnclaimed(T, claimed)).toBe('kept');
      expect(await ledger.releaseUnclaimed(T, left)).toBe('released');
      expect(await ledger.releaseUnclaimed(T, left)).toBe('kept');
      expect(await ledger.account(T, PERIOD)).toStrictEqual({ balance: 1_000, held: 300, leased: 0, cap: null, spent: 0 });
      await ledger.claim(T, 'req_unknown'); // no hold: nothing happens
      // No hold at all: a tombstone, so a reserve or a move for it arriving later holds nothing.
      expect(await ledger.releaseUnclaimed(T, 'req_unknown')).toBe('tombstone');
      expect(await ledger.releaseUnclaimed(T, 'req_unknown')).toBe('kept');
      expect(await ledger.reserve(reserveInput('req_unknown', { amount: 100 }))).toStrictEqual(REPLAY);
      const settled = await ledger.settle(settleInput(claimed, 120));
      expect(settled).toMatchObject({ applied: true, charged: 120 });
      expect(await ledger.account(T, PERIOD)).toStrictEqual({ balance: 880, held: 0, leased: 0, cap: null, spent: 120 });
    });

    it('a claim (another instance\'s response processing) and the placing instance\'s grace release, in either order: one wins whole, the settlement books once', async () => {
      await grant(ledger, 10_000);
      const ids = Array.from({ length: 10 }, () => rid());
      for (const id of ids) await ledger.reserve(reserveInput(id, { amount: 100 }));
      // Both sent at once (one connection: Redis runs them in the order sent); even ids: the claim first.
      const released = await Promise.all(
        ids.map(async (id, i) => {
          if (i % 2 === 0) return (await Promise.all([ledger.claim(T, id, 'inst-b'), ledger.releaseUnclaimed(T, id)]))[1];
          return (await Promise.all([ledger.releaseUnclaimed(T, id), ledger.claim(T, id, 'inst-b')]))[0];
        }),
      );
      expect(released).toEqual(ids.map((_, i) => (i % 2 === 1 ? 'released' : 'kept'))); // a claimed hold is never released; a released one is not claimed back
      expect(await ledger.account(T, PERIOD)).toStrictEqual({ balance: 10_000, held: 500, leased: 0, cap: null, spent: 0 });
      // Each request settles once: from its hold, or (released first) from the available balance.
      for (const id of ids) expect(await ledger.settle(settleInput(id, 60))).toMatchObject({ applied: true, charged: 60 });
      for (const id of ids) expect((await ledger.settle(settleInput(id, 60))).applied).toBe(false);
      expect(await ledger.account(T, PERIOD)).toStrictEqual({ balance: 10_000 - 600, held: 0, leased: 0, cap: null, spent: 600 });
      for (const id of ids) expect(await ledger.releaseUnclaimed(T, id)).toBe('kept');
    });

    it('a release before its reserve leaves a tombstone: the late reserve holds nothing (a command sent before an outage, run after it)', async () => {
      await grant(ledger, 1_000);
      const late = rid();
      expect(await ledger.release(T, late)).toBe(false);
      expect(await ledger.reserve(reserveInput(late, { amount: 400 }))).toStrictEqual(REPLAY);
      expect(await ledger.account(T, PERIOD)).toStrictEqual({ balance: 1_000, held: 0, leased: 0, cap: null, spent: 0 });
      expect(await ledger.tenantsWithHolds()).toEqual([]);
    });

    // ------------------------------------------------------------ credit leases

    it('extendLease opens a lease of at most the available balance / headroom; held grows, the balance does not', async () => {
      await grant(ledger, 10_000);
      expect(await ledger.extendLease(leaseInput('lease_1', { amount: 5_000 }))).toStrictEqual({ granted: 2_500, total: 2_500, gone: false });
      expect(await ledger.account(T, PERIOD)).toStrictEqual({ balance: 10_000, held: 0, leased: 2_500, cap: null, spent: 0 });
      expect(await ledger.tenantsWithHolds()).toEqual([T]);
      // Growing it: (10000 - 2500) / 4 = 1875 of the 2000 wanted.
      expect(await ledger.extendLease(leaseInput('lease_1', { amount: 2_000 }))).toStrictEqual({ granted: 1_875, total: 4_375, gone: false });
      expect(await ledger.account(T, PERIOD)).toMatchObject({ held: 0, leased: 4_375 });
      // Less room than the minimum: refused, nothing changes.
      const before = await snapshot(ledger);
      expect(await ledger.extendLease(leaseInput('lease_1', { amount: 2_000, minimum: 1_500 }))).toStrictEqual({ granted: 0, total: 4_375, gone: false });
      expect(await ledger.extendLease(leaseInput('lease_2', { amount: 2_000, minimum: 1_500 }))).toStrictEqual({ granted: 0, total: 0, gone: false });
      expect(await snapshot(ledger)).toEqual(before);
      // A direct reserve sees the lease as held.
      expect(await ledger.reserve(reserveInput(rid(), { amount: 5_626 }))).toEqual(refused('insufficient_credit'));
      expect(await ledger.reserve(reserveInput(rid(), { amount: 5_625 }))).toEqual(OK);
    });

    it('extendLease: with the credit check off only a spend cap limits it; a cap limits it to its room / headroom', async () => {
      expect(await ledger.extendLease(leaseInput('lease_free', { amount: 700, creditCheck: false }))).toStrictEqual({ granted: 700, total: 700, gone: false });
      await ledger.setCap(T, 2_700);
      await grant(ledger, 1_000_000);
      // Cap room: 2700 - 0 spent - 700 held = 2000; / 4 = 500.
      expect(await ledger.extendLease(leaseInput('lease_cap', { amount: 900 }))).toStrictEqual({ granted: 500, total: 500, gone: false });
      expect(await ledger.account(T, PERIOD)).toMatchObject({ held: 0, leased: 1_200 });
      expect(await ledger.reserve(reserveInput(rid(), { amount: 1_501 }))).toEqual(refused('spend_cap_exceeded'));
    });

    it('moveFromLease turns a piece of the lease into an open request hold: held unchanged, settled and released like any hold', async () => {
      await grant(ledger, 10_000);
      await ledger.extendLease(leaseInput('lease_1', { amount: 2_000 }));
      const a = rid();
      const b = rid();
      expect(await ledger.moveFromLease(moveInput('lease_1', a, 300))).toBe('moved');
      expect(await ledger.moveFromLease(moveInput('lease_1', b, 200))).toBe('moved');
      // Requests hold 500, the lease keeps 1500: 2000 set aside in all, as before the moves.
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 10_000, held: 500, leased: 1_500 });
      // The request holds are ordinary: settled at most their amount, released in full.
      expect(await ledger.settle(settleInput(a, 500))).toStrictEqual(settled(true, 300, 200));
      expect(await ledger.release(T, b)).toBe(true);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 9_700, held: 0, leased: 1_500, spent: 300 });
      // What is left of the lease goes back when it is released.
      expect(await ledger.release(T, 'lease_1')).toBe(true);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 9_700, held: 0, leased: 0 });
      expect(await ledger.tenantsWithHolds()).toEqual([]);
    });

    it('moveFromLease is idempotent by request id and never takes more than the lease has', async () => {
      await grant(ledger, 10_000);
      await ledger.extendLease(leaseInput('lease_1', { amount: 500 }));
      const a = rid();
      expect(await ledger.moveFromLease(moveInput('lease_1', a, 300))).toBe('moved');
      const before = await snapshot(ledger);
      expect(await ledger.moveFromLease(moveInput('lease_1', a, 300))).toBe('exists');
      expect(await ledger.moveFromLease(moveInput('lease_1', rid(), 201))).toBe('no_lease');
      expect(await ledger.moveFromLease(moveInput('lease_unknown', rid(), 1))).toBe('no_lease');
      // A tombstone (released before its move arrived) or a settled request: nothing moves.
      const late = rid();
      await ledger.release(T, late);
      expect(await ledger.moveFromLease(moveInput('lease_1', late, 100))).toBe('exists');
      const gone = rid();
      await ledger.settle(settleInput(gone, 0));
      expect(await ledger.moveFromLease(moveInput('lease_1', gone, 100))).toBe('exists');
      expect((await ledger.account(T, PERIOD)).held).toBe(before.account.held);
      // The rest of the lease can still move, to the last micro-unit.
      expect(await ledger.moveFromLease(moveInput('lease_1', rid(), 200))).toBe('moved');
      expect(await ledger.moveFromLease(moveInput('lease_1', rid(), 0))).toBe('moved');
      expect(await ledger.moveFromLease(moveInput('lease_1', rid(), 1))).toBe('no_lease');
    });

    it('a released or reaped lease is gone: it neither grows nor moves; a lease is renewed and reaped like a hold', async () => {
      await grant(ledger, 10_000);
      await ledger.extendLease(leaseInput('lease_r', { amount: 400 }));
      await ledger.release(T, 'lease_r');
      expect(await ledger.extendLease(leaseInput('lease_r', { amount: 400 }))).toStrictEqual({ granted: 0, total: 0, gone: true });
      expect(await ledger.moveFromLease(moveInput('lease_r', rid(), 1))).toBe('no_lease');

      // Lease of 30 s: renewed to NOW + 50 s, reaped after it.
      await ledger.extendLease(leaseInput('lease_x', { amount: 400 }));
      expect(await ledger.renewLeases(T, ['lease_x'], NOW + 20_000, 30)).toBe(1);
      expect(await ledger.reapExpired(T, NOW + 49_000)).toBe(0);
      expect(await ledger.reapExpired(T, NOW + 50_000)).toBe(1);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ held: 0, leased: 0 });
      expect(await ledger.extendLease(leaseInput('lease_x', { now: NOW + 51_000 }))).toStrictEqual({ granted: 0, total: 0, gone: true });

      // Past its ttl (120 s) a lease no longer grows, even before the reaper saw it.
      await ledger.extendLease(leaseInput('lease_old', { amount: 400 }));
      expect(await ledger.extendLease(leaseInput('lease_old', { now: NOW + 120_000 }))).toStrictEqual({ granted: 0, total: 400, gone: true });
    });

    it('a cap change makes the open leases stale: they admit and grow no more, but what was admitted inside them still moves out; a deduct or a grant does not', async () => {
      await grant(ledger, 10_000);
      await ledger.extendLease(leaseInput('lease_a', { amount: 1_000 }));
      await ledger.extendLease(leaseInput('lease_b', { amount: 1_000 }));
      expect(await ledger.moveFromLease(moveInput('lease_a', rid(), 100))).toBe('moved');
      await ledger.setCap(T, 50_000);
      const before = await snapshot(ledger);
      expect(await ledger.moveFromLease(moveInput('lease_a', rid(), 100))).toBe('stale');
      expect(await ledger.extendLease(leaseInput('lease_b', { amount: 10 }))).toStrictEqual({ granted: 0, total: 1_000, gone: true });
      expect(await snapshot(ledger)).toEqual(before); // nothing given back: requests may be committed inside them
      // A request admitted before the change moves out of the stale lease (its credit only changes place).
      expect(await ledger.moveFromLease({ ...moveInput('lease_a', rid(), 100), admitted: true })).toBe('moved');
      expect(await ledger.account(T, PERIOD)).toMatchObject({ held: 200, leased: 1_800 });
      expect(await ledger.release(T, 'lease_a')).toBe(true);
      expect(await ledger.release(T, 'lease_b')).toBe(true);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ held: 200, leased: 0 });
      // A lease opened after the change is fresh; a grant or a deduct leaves it so.
      await ledger.extendLease(leaseInput('lease_c', { amount: 500 }));
      await grant(ledger, 1);
      expect(await ledger.moveFromLease(moveInput('lease_c', rid(), 100))).toBe('moved');
      await ledger.adjustBalance(T, -1, 'deduct_1', 'deduct', NOW);
      expect(await ledger.moveFromLease(moveInput('lease_c', rid(), 100))).toBe('moved');
    });

    it('staleLeased: what open leases granted before the last cap change still set aside', async () => {
      await grant(ledger, 10_000);
      expect(await ledger.staleLeased(T)).toBe(0);
      await ledger.extendLease(leaseInput('lease_a', { amount: 400, headroom: 1 }));
      await ledger.extendLease(leaseInput('lease_b', { amount: 300, headroom: 1 }));
      await ledger.reserve(reserveInput(rid(), { amount: 100 })); // a request's hold is not a lease
      expect(await ledger.staleLeased(T)).toBe(0);
      await ledger.setCap(T, 1_000_000);
      expect(await ledger.staleLeased(T)).toBe(700);
      await ledger.extendLease(leaseInput('lease_c', { amount: 200, headroom: 1 })); // fresh
      expect(await ledger.moveFromLease({ ...moveInput('lease_a', rid(), 150), admitted: true })).toBe('moved');
      expect(await ledger.staleLeased(T)).toBe(550);
      await ledger.release(T, 'lease_a');
      await ledger.release(T, 'lease_b');
      expect(await ledger.staleLeased(T)).toBe(0);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ held: 250, leased: 200 });
      expect(await ledger.staleLeased('ten_nobody')).toBe(0);
    });

    it('a settlement takes a commitment out of its lease when the request has no hold: charged at most the commitment, the rest of the lease stays', async () => {
      await grant(ledger, 10_000);
      await ledger.extendLease(leaseInput('lease_1', { amount: 1_000 }));
      const a = rid();
      const b = rid();
      expect(await ledger.settle({ ...settleInput(a, 250), lease: { id: 'lease_1', amount: 300 } })).toStrictEqual({ ...settled(true, 250, 0), leaseStale: false });
      expect(await ledger.account(T, PERIOD)).toStrictEqual({ balance: 9_750, held: 0, leased: 700, cap: null, spent: 250 });
      // Above the commitment: charged the commitment, the rest uncovered (as for a hold).
      expect(await ledger.settle({ ...settleInput(b, 500), lease: { id: 'lease_1', amount: 200 } })).toStrictEqual({ ...settled(true, 200, 300), leaseStale: false });
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 9_550, held: 0, leased: 500, spent: 450 });
      // Idempotent: a second settlement of either changes nothing and takes nothing from the lease.
      expect((await ledger.settle({ ...settleInput(a, 250), lease: { id: 'lease_1', amount: 300 } })).applied).toBe(false);
      expect(await ledger.moveFromLease({ ...moveInput('lease_1', b, 200), admitted: true })).toBe('exists');
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 9_550, held: 0, leased: 500 });
      // Moved out before its settlement (the lease was being given back): its own hold is settled, the lease untouched.
      const c = rid();
      expect(await ledger.moveFromLease({ ...moveInput('lease_1', c, 100), admitted: true })).toBe('moved');
      expect(await ledger.settle({ ...settleInput(c, 40), lease: { id: 'lease_1', amount: 100 } })).toStrictEqual(settled(true, 40, 0));
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 9_510, held: 0, leased: 400 });
      // Released before (a tombstone): settled like a hold that is gone, nothing taken from the lease.
      const d = rid();
      expect(await ledger.release(T, d)).toBe(false);
      expect(await ledger.settle({ ...settleInput(d, 10), lease: { id: 'lease_1', amount: 100 } })).toStrictEqual(settled(true, 10, 0));
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 9_500, held: 0, leased: 400 });
      expect(await ledger.release(T, 'lease_1')).toBe(true);
      expect(await ledger.account(T, PERIOD)).toStrictEqual({ balance: 9_500, held: 0, leased: 0, cap: null, spent: 500 });
    });

    it('a settlement whose lease is gone, too small or stale says so; a gone or too small one is settled like a reaped hold', async () => {
      await grant(ledger, 1_000);
      await ledger.extendLease(leaseInput('lease_s', { amount: 400, headroom: 1 }));
      // Too small: nothing taken from it; charged from the available balance (1000 - 400 held by the lease).
      expect(await ledger.settle({ ...settleInput(rid(), 50), lease: { id: 'lease_s', amount: 401 } })).toStrictEqual({ ...settled(true, 50, 0), leaseStale: true });
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 950, leased: 400 });
      // Unknown: the same. A request's own hold is not a lease: nothing is taken from it.
      expect(await ledger.settle({ ...settleInput(rid(), 50), lease: { id: 'lease_none', amount: 1 } })).toStrictEqual({ ...settled(true, 50, 0), leaseStale: true });
      const other = rid();
      await ledger.reserve(reserveInput(other, { amount: 100 }));
      expect(await ledger.settle({ ...settleInput(rid(), 10), lease: { id: other, amount: 100 } })).toStrictEqual({ ...settled(true, 10, 0), leaseStale: true });
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 890, held: 100, leased: 400 });
      expect(await ledger.release(T, other)).toBe(true);
      // Stale (the cap changed): still taken out of it (it holds the credit), and reported.
      await ledger.setCap(T, 100_000);
      expect(await ledger.settle({ ...settleInput(rid(), 30), lease: { id: 'lease_s', amount: 60 } })).toStrictEqual({ ...settled(true, 30, 0), leaseStale: true });
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 860, held: 0, leased: 340, spent: 140 });
      // To the last micro-unit: a commitment of all that is left empties it.
      expect(await ledger.settle({ ...settleInput(rid(), 0), lease: { id: 'lease_s', amount: 340 } })).toStrictEqual({ ...settled(true, 0, 0), leaseStale: true });
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 860, held: 0, leased: 0 });
      // A request id cannot be its own lease; a negative commitment is refused.
      await expect(ledger.settle({ ...settleInput('req_self', 1), lease: { id: 'req_self', amount: 1 } })).rejects.toThrow(TypeError);
      await expect(ledger.settle({ ...settleInput(rid(), 1), lease: { id: 'lease_s', amount: -1 } })).rejects.toThrow(TypeError);
    });

    it('a move for another process\'s response processing claims the hold: the placing process\'s grace release keeps it', async () => {
      await grant(ledger, 10_000);
      await ledger.extendLease(leaseInput('lease_1', { amount: 1_000 }));
      const a = rid();
      expect(await ledger.moveFromLease({ ...moveInput('lease_1', a, 300), admitted: true, claim: true })).toBe('moved');
      expect(await ledger.releaseUnclaimed(T, a)).toBe('kept');
      expect(await ledger.account(T, PERIOD)).toMatchObject({ held: 300, leased: 700 });
      // The other order: the grace release first leaves a tombstone; the move finds it and moves nothing.
      const b = rid();
      expect(await ledger.releaseUnclaimed(T, b)).toBe('tombstone');
      expect(await ledger.moveFromLease({ ...moveInput('lease_1', b, 300), admitted: true, claim: true })).toBe('exists');
      expect(await ledger.account(T, PERIOD)).toMatchObject({ held: 300, leased: 700 });
    });

    it('extendLease and moveFromLease refuse bad input with TypeError before any write', async () => {
      await grant(ledger, 10_000);
      const before = await snapshot(ledger);
      const bad: Array<Partial<LeaseInput>> = [
        { amount: 0 }, { amount: 1.5 }, { minimum: 0 }, { headroom: 0 }, { leaseId: '' }, { tenantId: '' },
        { holdTtlSeconds: 0 }, { leaseSeconds: -1 }, { now: Number.NaN }, { period: '' },
      ];
      for (const over of bad) await expect(ledger.extendLease(leaseInput('lease_1', over))).rejects.toThrow(TypeError);
      await ledger.extendLease(leaseInput('lease_1'));
      const opened = await snapshot(ledger);
      expect(opened.account.leased).toBeGreaterThan(before.account.leased);
      const badMoves: Array<[string, string, number]> = [['lease_1', '', 1], ['', 'req_x', 1], ['lease_1', 'req_x', -1], ['lease_1', 'req_x', 0.5], ['lease_1', 'lease_1', 1]];
      for (const [l, r, amt] of badMoves) await expect(ledger.moveFromLease(moveInput(l, r, amt))).rejects.toThrow(TypeError);
      expect(await snapshot(ledger)).toEqual(opened);
    });

    it('reapExpired releases exactly the holds whose time ran out', async () => {
      await grant(ledger, 1_000);
      const short = rid();
      const long = rid();
      const done = rid();
      await ledger.reserve(reserveInput(short, { amount: 100, holdTtlSeconds: 10 }));
      await ledger.reserve(reserveInput(long, { amount: 200, holdTtlSeconds: 60 }));
      await ledger.reserve(reserveInput(done, { amount: 300, holdTtlSeconds: 1 }));
      await ledger.settle(settleInput(done, 50));
      expect(await ledger.reapExpired(T, NOW + 9_999)).toBe(0);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 950, held: 300 });
      expect(await ledger.reapExpired(T, NOW + 10_000)).toBe(1);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 950, held: 200 });
      expect(await ledger.tenantsWithHolds()).toEqual([T]);
      expect(await ledger.release(T, short)).toBe(false);
      expect(await ledger.reapExpired(T, NOW + 60_000)).toBe(1);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 950, held: 0 });
      expect(await ledger.tenantsWithHolds()).toEqual([]);
      expect(await ledger.reapExpired(T, NOW + 120_000)).toBe(0);
      expect(await ledger.reapExpired('ten_unknown', NOW + 120_000)).toBe(0);
      // A reaped hold settles like a released one.
      expect(await ledger.settle(settleInput(long, 120))).toStrictEqual(settled(true, 120, 0));
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 830, held: 0, spent: 170 });
    });

    it('a hold with a lease expires at the end of its lease, not its ttl: the reaper releases it (its owner died)', async () => {
      await grant(ledger, 1_000);
      const a = rid();
      await ledger.reserve(reserveInput(a, { amount: 400, holdTtlSeconds: 3600, leaseSeconds: 5, owner: 'inst-1' }));
      expect(await ledger.reapExpired(T, NOW + 4_999)).toBe(0);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 1_000, held: 400 });
      expect(await ledger.reapExpired(T, NOW + 5_000)).toBe(1);
      expect(await ledger.account(T, PERIOD)).toStrictEqual({ balance: 1_000, held: 0, leased: 0, cap: null, spent: 0 });
      expect(await ledger.tenantsWithHolds()).toEqual([]);
      // A reaped hold cannot be renewed back to life.
      expect(await ledger.renewLeases(T, [a], NOW + 6_000, 5)).toBe(0);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ held: 0 });
    });

    it('renewLeases keeps a live exchange\'s hold for as long as it is renewed, never past its ttl', async () => {
      await grant(ledger, 1_000);
      const live = rid();
      const dead = rid();
      const done = rid();
      const lease = { holdTtlSeconds: 60, leaseSeconds: 5, owner: 'inst-1' };
      await ledger.reserve(reserveInput(live, { amount: 100, ...lease }));
      await ledger.reserve(reserveInput(dead, { amount: 200, ...lease, owner: 'inst-2' }));
      await ledger.reserve(reserveInput(done, { amount: 300, ...lease }));
      await ledger.settle(settleInput(done, 30));
      // Renewed every 3 s for 40 s: the live hold stays; the unrenewed one goes at its lease end.
      let reaped = 0;
      for (let t = 3_000; t <= 40_000; t += 3_000) {
        expect(await ledger.renewLeases(T, [live, done, 'req_unknown'], NOW + t, 5)).toBe(1);
        reaped += await ledger.reapExpired(T, NOW + t + 1);
      }
      expect(reaped).toBe(1);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 970, held: 100 });
      // The ttl bounds every renewal: at 60 s the hold expires whatever the renewals.
      expect(await ledger.renewLeases(T, [live], NOW + 58_000, 5)).toBe(1);
      expect(await ledger.reapExpired(T, NOW + 59_999)).toBe(0);
      expect(await ledger.reapExpired(T, NOW + 60_000)).toBe(1);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 970, held: 0 });
      expect(await ledger.renewLeases(T, [], NOW, 5)).toBe(0);
      expect(await ledger.renewLeases('ten_unknown', [live], NOW, 5)).toBe(0);
    });

    it('a claim by another instance keeps the hold open and renewable', async () => {
      await grant(ledger, 1_000);
      const a = rid();
      await ledger.reserve(reserveInput(a, { amount: 100, holdTtlSeconds: 60, leaseSeconds: 5, owner: 'inst-1' }));
      await ledger.claim(T, a, 'inst-2');
      expect(await ledger.renewLeases(T, [a], NOW + 4_000, 5)).toBe(1);
      expect(await ledger.reapExpired(T, NOW + 8_999)).toBe(0);
      expect(await ledger.settle(settleInput(a, 40, { now: NOW + 8_000 }))).toStrictEqual(settled(true, 40, 0));
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 960, held: 0 });
    });

    it('renewLeases refuses bad input before any write', async () => {
      for (const call of [
        () => ledger.renewLeases('', ['r'], NOW, 5),
        () => ledger.renewLeases(T, 'r' as unknown as string[], NOW, 5),
        () => ledger.renewLeases(T, [''], NOW, 5),
        () => ledger.renewLeases(T, ['r'], -1, 5),
        () => ledger.renewLeases(T, ['r'], NOW, 0),
        () => ledger.renewLeases(T, ['r'], NOW, Number.NaN),
      ]) {
        await expect(call()).rejects.toBeInstanceOf(TypeError);
      }
      await expect(ledger.reserve(reserveInput(rid(), { leaseSeconds: 0 }))).rejects.toBeInstanceOf(TypeError);
    });

    it('tenantsWithHolds lists the tenants with at least one open hold', async () => {
      const a = rid();
      await ledger.reserve(reserveInput(a, { tenantId: 'ten_b', amount: 0 }));
      await ledger.reserve(reserveInput(rid(), { tenantId: 'ten_a', amount: 0 }));
      const c = rid();
      await ledger.reserve(reserveInput(c, { tenantId: 'ten_c', amount: 0 }));
      expect((await ledger.tenantsWithHolds()).sort()).toEqual(['ten_a', 'ten_b', 'ten_c']);
      await ledger.release('ten_b', a);
      await ledger.settle(settleInput(c, 0, { tenantId: 'ten_c' }));
      expect(await ledger.tenantsWithHolds()).toEqual(['ten_a']);
    });

    // ------------------------------------------------------------ adjustBalance

    it('adjustBalance grants and deducts with ledger entries', async () => {
      const g = await ledger.adjustBalance(T, 1_000, 'k1', 'top-up', NOW);
      expect(g).toStrictEqual({
        id: g.id,
        time: new Date(NOW).toISOString(),
        type: 'grant',
        amount: 1_000,
        balanceAfter: 1_000,
        requestId: null,
        reason: 'top-up',
        replayed: false,
      });
      const d = await ledger.adjustBalance(T, -300, 'k2', 'refund', NOW + 1);
      expect(d).toStrictEqual({
        id: d.id,
        time: new Date(NOW + 1).toISOString(),
        type: 'deduct',
        amount: -300,
        balanceAfter: 700,
        requestId: null,
        reason: 'refund',
        replayed: false,
      });
      expect(d.id).not.toBe(g.id);
      expect(await ledger.ledger(T, 10)).toStrictEqual([entryOf(d), entryOf(g)]);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 700, held: 0, spent: 0 });
    });

    it('ledger pages: entries older than `before`, newest first, unmoved by entries written between pages', async () => {
      const written: LedgerEntry[] = [];
      for (let i = 0; i < 7; i++) written.push(await grant(ledger, 100 + i));
      const page1 = await ledger.ledger(T, 3);
      expect(page1.map((e) => e.amount)).toEqual([106, 105, 104]);
      await grant(ledger, 999); // arrives between pages
      const page2 = await ledger.ledger(T, 3, page1[2]!.id);
      expect(page2.map((e) => e.amount)).toEqual([103, 102, 101]);
      const page3 = await ledger.ledger(T, 3, page2[2]!.id);
      expect(page3.map((e) => e.amount)).toEqual([100]);
      expect(await ledger.ledger(T, 3, written[0]!.id)).toEqual([]);
    });

    it('adjustBalance is idempotent by key: the first entry comes back, even for another amount', async () => {
      const first = await ledger.adjustBalance(T, 1_000, 'k1', 'top-up', NOW);
      expect(first.replayed).toBe(false);
      // A repeat says it changed nothing (the operator CLI prints "already applied").
      const again = { ...first, replayed: true };
      expect(await ledger.adjustBalance(T, 1_000, 'k1', 'top-up', NOW + 5)).toStrictEqual(again);
      expect(await ledger.adjustBalance(T, 7, 'k1', 'other', NOW + 6)).toStrictEqual(again);
      expect(await ledger.adjustBalance(T, -1_000, 'k1', 'other', NOW + 7)).toStrictEqual(again);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 1_000 });
      expect(await ledger.ledger(T, 10)).toStrictEqual([entryOf(first)]);
      // Keys are per tenant.
      const other = await ledger.adjustBalance('ten_b', 5, 'k1', 'top-up', NOW);
      expect(other).toMatchObject({ amount: 5, balanceAfter: 5 });
      expect((await ledger.account('ten_b', PERIOD)).balance).toBe(5);
    });

    it('a deduct never takes the balance below zero; a refused key stays unused', async () => {
      await ledger.adjustBalance(T, 500, 'k1', 'top-up', NOW);
      const before = await snapshot(ledger);
      await expect(ledger.adjustBalance(T, -501, 'k2', 'too much', NOW)).rejects.toBeInstanceOf(
        InsufficientBalanceError,
      );
      expect(await snapshot(ledger)).toEqual(before);
      await expect(ledger.adjustBalance('ten_empty', -1, 'k9', 'nothing there', NOW)).rejects.toBeInstanceOf(
        InsufficientBalanceError,
      );
      const ok = await ledger.adjustBalance(T, -200, 'k2', 'fits now', NOW);
      expect(ok).toMatchObject({ type: 'deduct', amount: -200, balanceAfter: 300, reason: 'fits now' });
      const zero = await ledger.adjustBalance(T, -300, 'k3', 'to zero', NOW);
      expect(zero.balanceAfter).toBe(0);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 0 });
    });

    it('a deduct never takes what is held, leases included: leased credit in the way refuses it with `leased` and blocks new leases for a moment', async () => {
      await grant(ledger, 1_000);
      expect(await ledger.reserve(reserveInput('req_held', { amount: 700 }))).toEqual(OK);
      const before = await snapshot(ledger);
      // 1,000 - 301 < 700: the request's hold would no longer be covered.
      const refused = await ledger.adjustBalance(T, -301, 'd1', 'too much', NOW).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(InsufficientBalanceError);
      expect((refused as InsufficientBalanceError).leased).toBe(false);
      expect(await snapshot(ledger)).toEqual(before);
      const ok = await ledger.adjustBalance(T, -300, 'd1', 'fits', NOW);
      expect(ok).toMatchObject({ type: 'deduct', amount: -300, balanceAfter: 700 });
      // The request is paid in full from what it held; the balance never goes below zero.
      expect(await ledger.settle(settleInput('req_held', 700))).toStrictEqual(settled(true, 700, 0));
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 0, held: 0 });

      // Requests committed inside a lease hold part of it: a deduct may not take leased credit.
      await grant(ledger, 1_000);
      await ledger.extendLease(leaseInput('lease_x', { amount: 400, headroom: 1 }));
      expect(await ledger.moveFromLease(moveInput('lease_x', 'req_moved', 100))).toBe('moved');
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 1_000, held: 100, leased: 300 });
      const beforeLeased = await snapshot(ledger);
      const inTheWay = await ledger.adjustBalance(T, -601, 'd2', 'needs the leased part', NOW).catch((e: unknown) => e);
      expect(inTheWay).toBeInstanceOf(InsufficientBalanceError);
      expect((inTheWay as InsufficientBalanceError).leased).toBe(true);
      const beyond = await ledger.adjustBalance(T, -901, 'd3', 'more than leases could give', NOW).catch((e: unknown) => e);
      expect((beyond as InsufficientBalanceError).leased).toBe(false);
      expect(await ledger.account(T, PERIOD)).toEqual(beforeLeased.account);
      // For LEASE_BLOCK_MS no lease is granted or grown; then again.
      expect(await ledger.extendLease(leaseInput('lease_x', { amount: 10, headroom: 1, now: NOW + LEASE_BLOCK_MS - 1 }))).toStrictEqual({ granted: 0, total: 300, gone: false });
      expect(await ledger.extendLease(leaseInput('lease_y', { amount: 10, headroom: 1, now: NOW + LEASE_BLOCK_MS - 1 }))).toStrictEqual({ granted: 0, total: 0, gone: false });
      expect((await ledger.extendLease(leaseInput('lease_x', { amount: 10, headroom: 1, now: NOW + LEASE_BLOCK_MS }))).granted).toBe(10);
      // The lease given back, the same deduct (a new key) fits.
      expect(await ledger.release(T, 'lease_x')).toBe(true);
      expect(await ledger.adjustBalance(T, -601, 'd4', 'after the recall', NOW)).toMatchObject({ balanceAfter: 399 });
      expect(await ledger.settle(settleInput('req_moved', 100))).toStrictEqual(settled(true, 100, 0));
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 299, held: 0, leased: 0 });
    });

    it('adjustBalance rejects a zero or non-integer amount with TypeError', async () => {
      const bad = [0, 1.5, -0.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53, '5' as unknown as number];
      for (const amount of bad) {
        await expect(ledger.adjustBalance(T, amount, `k_${String(amount)}`, 'bad', NOW)).rejects.toBeInstanceOf(
          TypeError,
        );
      }
      await expect(ledger.adjustBalance('', 5, 'k', 'bad', NOW)).rejects.toBeInstanceOf(TypeError);
      await expect(ledger.adjustBalance(T, 5, '', 'bad', NOW)).rejects.toBeInstanceOf(TypeError);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 0 });
      expect(await ledger.ledger(T, 10)).toEqual([]);
    });

    it('setCap accepts null or a non-negative safe integer', async () => {
      for (const cap of [-1, 1.5, Number.NaN, 2 ** 53, '10' as unknown as number]) {
        await expect(ledger.setCap(T, cap)).rejects.toBeInstanceOf(TypeError);
      }
      expect((await ledger.account(T, PERIOD)).cap).toBeNull();
      await ledger.setCap(T, 0);
      expect((await ledger.account(T, PERIOD)).cap).toBe(0);
      await ledger.setCap(T, 2_500);
      expect((await ledger.account(T, PERIOD)).cap).toBe(2_500);
      await ledger.setCap(T, null);
      expect((await ledger.account(T, PERIOD)).cap).toBeNull();
    });

    // ------------------------------------------------------------ validation

    it('rejects invalid reserve and settle inputs with TypeError and changes nothing', async () => {
      await grant(ledger, 1_000);
      const before = await snapshot(ledger);
      const badReserves: Partial<ReserveInput>[] = [
        { amount: -1 },
        { amount: 1.5 },
        { amount: Number.NaN },
        { amount: 2 ** 53 },
        { tokens: -1 },
        { tokens: 0.5 },
        { tenantId: '' },
        { requestId: '' },
      ];
      for (const over of badReserves) {
        await expect(ledger.reserve(reserveInput(rid(), over))).rejects.toBeInstanceOf(TypeError);
      }
      const a = rid();
      await ledger.reserve(reserveInput(a, { amount: 100 }));
      const afterReserve = await snapshot(ledger);
      for (const charge of [-1, 2.5, Number.NaN, 2 ** 53]) {
        await expect(ledger.settle(settleInput(a, charge))).rejects.toBeInstanceOf(TypeError);
      }
      await expect(ledger.settle(settleInput(a, 10, { tenantId: '' }))).rejects.toBeInstanceOf(TypeError);
      await expect(ledger.settle({ ...settleInput(a, 10), requestId: '' })).rejects.toBeInstanceOf(TypeError);
      expect(await snapshot(ledger)).toEqual(afterReserve);
      await ledger.release(T, a);
      expect(await snapshot(ledger)).toEqual(before);
    });

    // ------------------------------------------------------------ ledger and usage

    it('both ledgers refuse the same admin inputs: a bad reason, time, period or listing limit', async () => {
      await expect(ledger.adjustBalance(T, 5, 'k-reason', 7 as unknown as string, NOW)).rejects.toBeInstanceOf(TypeError);
      await expect(ledger.adjustBalance(T, 5, 'k-now', 'r', Number.NaN)).rejects.toBeInstanceOf(TypeError);
      await expect(ledger.reapExpired(T, Number.NaN)).rejects.toBeInstanceOf(TypeError);
      await expect(ledger.account(T, '')).rejects.toBeInstanceOf(TypeError);
      for (const limit of [-1, 1.5, Number.NaN]) {
        await expect(ledger.ledger(T, limit)).rejects.toBeInstanceOf(TypeError);
        await expect(ledger.usageRecords(T, limit)).rejects.toBeInstanceOf(TypeError);
      }
      expect(await ledger.ledger(T, 0)).toEqual([]);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 0 });
    });

    it('an empty reason reads back as an empty string; charges have no reason', async () => {
      await ledger.adjustBalance(T, 1_000, 'k-empty', '', NOW);
      const r = rid();
      await ledger.reserve(reserveInput(r, { amount: 100 }));
      await ledger.settle(settleInput(r, 10));
      const entries = await ledger.ledger(T, 10);
      expect(entries.map((e) => [e.type, e.reason])).toEqual([
        ['charge', null],
        ['grant', ''],
      ]);
    });

    it('ledger and usage records are newest first, at most limit, with unique ids', async () => {
      await grant(ledger, 10_000);
      const settles: SettleInput[] = [];
      for (let i = 1; i <= 5; i++) {
        const r = rid();
        await ledger.reserve(reserveInput(r, { amount: 1_000 }));
        const input = settleInput(r, i * 10, { now: NOW + i * 1_000, usage: { promptTokens: i } });
        settles.push(input);
        await ledger.settle(input);
      }
      await ledger.adjustBalance(T, -50, 'late', 'correction', NOW + 9_000);
      const all = await ledger.ledger(T, 100);
      expect(all.map((e) => [e.type, e.amount, e.balanceAfter])).toEqual([
        ['deduct', -50, 9_800],
        ['charge', -50, 9_850],
        ['charge', -40, 9_900],
        ['charge', -30, 9_940],
        ['charge', -20, 9_970],
        ['charge', -10, 9_990],
        ['grant', 10_000, 10_000],
      ]);
      expect(all.slice(1, 6).map((e) => e.requestId)).toEqual(settles.map((s) => s.requestId).reverse());
      expect(new Set(all.map((e) => e.id)).size).toBe(all.length);
      for (const e of all) expect(new Date(e.time).toISOString()).toBe(e.time);
      expect(await ledger.ledger(T, 3)).toStrictEqual(all.slice(0, 3));
      expect(await ledger.ledger(T, 0)).toEqual([]);

      const records = await ledger.usageRecords(T, 100);
      expect(records).toStrictEqual(settles.map((s, i) => ({ ...s.usage, cost: (i + 1) * 10 })).reverse());
      expect(await ledger.usageRecords(T, 2)).toStrictEqual(records.slice(0, 2));
      expect(await ledger.usageRecords(T, 0)).toEqual([]);
    });

    it('aggregates usage by (day, alias); inclusive day range; sorted by day then alias', async () => {
      await grant(ledger, 100_000);
      const rows: Array<[string, string, number, number, number, number]> = [
        // day, alias, prompt, completion, requestCount, charge
        ['2026-11-02', 'chat-small', 10, 20, 1, 100],
        ['2026-11-01', 'chat-small', 1, 2, 1, 10],
        ['2026-11-01', 'chat-large', 5, 6, 2, 70],
        ['2026-11-01', 'chat-small', 3, 4, 1, 30],
        ['2026-11-03', 'chat-large', 7, 8, 1, 90],
        ['2026-10-31', 'chat-small', 9, 9, 1, 5],
      ];
      for (const [d, alias, promptTokens, completionTokens, requestCount, charge] of rows) {
        const r = rid();
        await ledger.reserve(reserveInput(r, { amount: 1_000 }));
        await ledger.settle(
          settleInput(r, charge, {
            day: d,
            usage: {
              alias,
              promptTokens,
              completionTokens,
              totalTokens: promptTokens + completionTokens,
              requestCount,
            },
          }),
        );
      }
      const day = (d: string, alias: string, p: number, c: number, n: number, cost: number): UsageDay => ({
        day: d,
        alias,
        promptTokens: p,
        completionTokens: c,
        requests: n,
        cost,
      });
      expect(await ledger.usageByDay(T, '2026-11-01', '2026-11-02')).toStrictEqual([
        day('2026-11-01', 'chat-large', 5, 6, 2, 70),
        day('2026-11-01', 'chat-small', 4, 6, 2, 40),
        day('2026-11-02', 'chat-small', 10, 20, 1, 100),
      ]);
      expect(await ledger.usageByDay(T, ...ALL_DAYS)).toStrictEqual([
        day('2026-10-31', 'chat-small', 9, 9, 1, 5),
        day('2026-11-01', 'chat-large', 5, 6, 2, 70),
        day('2026-11-01', 'chat-small', 4, 6, 2, 40),
        day('2026-11-02', 'chat-small', 10, 20, 1, 100),
        day('2026-11-03', 'chat-large', 7, 8, 1, 90),
      ]);
      expect(await ledger.usageByDay(T, '2026-11-03', '2026-11-03')).toStrictEqual([
        day('2026-11-03', 'chat-large', 7, 8, 1, 90),
      ]);
      expect(await ledger.usageByDay(T, '2026-11-04', '2026-12-31')).toEqual([]);
      expect(await ledger.usageByDay(T, '2026-11-03', '2026-11-01')).toEqual([]);
      expect(await ledger.usageByDay('ten_b', ...ALL_DAYS)).toEqual([]);
    });

    it('hands out copies: mutating inputs or results never changes the ledger', async () => {
      const g = (await grant(ledger, 1_000)) as Mutable<LedgerEntry>;
      g.amount = 5;
      g.balanceAfter = 5;
      const a = rid();
      await ledger.reserve(reserveInput(a, { amount: 200 }));
      const input = settleInput(a, 150);
      const usageInput = input.usage as Mutable<Omit<UsageRecord, 'cost'>>;
      await ledger.settle(input);
      usageInput.alias = 'changed';
      usageInput.promptTokens = 999;

      const before = await snapshot(ledger);
      const entries = (await ledger.ledger(T, 10)) as Mutable<LedgerEntry>[];
      entries[0]!.amount = 0;
      entries.pop();
      const records = (await ledger.usageRecords(T, 10)) as Mutable<UsageRecord>[];
      records[0]!.cost = 0;
      const days = (await ledger.usageByDay(T, ...ALL_DAYS)) as Mutable<UsageDay>[];
      days[0]!.cost = 0;
      const account = (await ledger.account(T, PERIOD)) as { balance: number };
      account.balance = 0;
      const holders = await ledger.tenantsWithHolds();
      holders.push('ten_x');
      expect(await snapshot(ledger)).toEqual(before);
      expect(before.usage[0]).toMatchObject({ alias: 'chat-small', promptTokens: 12, cost: 150 });
      expect(before.ledger[1]).toMatchObject({ amount: 1_000, balanceAfter: 1_000 });
      expect(before.account.balance).toBe(850);
    });

    // ------------------------------------------------------------ concurrency

    it('200 concurrent reserves against a balance for 10 holds: exactly 10 succeed', async () => {
      await grant(ledger, 1_000);
      const ids = Array.from({ length: 200 }, () => rid());
      const outcomes = await Promise.all(ids.map((r) => ledger.reserve(reserveInput(r, { amount: 100 }))));
      const won = ids.filter((_, i) => outcomes[i]!.ok);
      expect(won).toHaveLength(10);
      for (const o of outcomes) {
        if (o.ok) expect(o.replay).toBe(false);
        else expect(o.reason).toBe('insufficient_credit');
      }
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 1_000, held: 1_000 });

      const outcomes2 = await Promise.all(won.map((r) => ledger.settle(settleInput(r, 60))));
      for (const s of outcomes2) expect(s).toStrictEqual(settled(true, 60, 0));
      expect(await ledger.account(T, PERIOD)).toStrictEqual({ balance: 400, held: 0, leased: 0, cap: null, spent: 600 });
      expect(await ledger.tenantsWithHolds()).toEqual([]);
      expect(await ledger.usageRecords(T, 100)).toHaveLength(10);
      expect(await ledger.ledger(T, 100)).toHaveLength(11);
    });

    it('racing reserves and settles of one request id apply once', async () => {
      await grant(ledger, 1_000);
      const a = rid();
      const reserves = await Promise.all(
        Array.from({ length: 20 }, () => ledger.reserve(reserveInput(a, { amount: 300 }))),
      );
      expect(reserves.filter((o) => o.ok && !o.replay)).toHaveLength(1);
      expect(reserves.every((o) => o.ok)).toBe(true);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 1_000, held: 300 });
      const settles = await Promise.all(
        Array.from({ length: 20 }, (_, i) => ledger.settle(settleInput(a, 100 + i))),
      );
      const applied = settles.filter((s) => s.applied);
      expect(applied).toHaveLength(1);
      for (const s of settles) expect(s.charged).toBe(applied[0]!.charged);
      expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 1_000 - applied[0]!.charged, held: 0 });
      expect(await ledger.usageRecords(T, 100)).toHaveLength(1);
      const releases = await Promise.all(Array.from({ length: 5 }, () => ledger.release(T, a)));
      expect(releases.every((r) => !r)).toBe(true);
    });

    it('racing adjustments with one key apply once', async () => {
      const entries = await Promise.all(
        Array.from({ length: 20 }, (_, i) => ledger.adjustBalance(T, 100 + i, 'same', 'race', NOW)),
      );
      for (const e of entries) expect(entryOf(e)).toStrictEqual(entryOf(entries[0]!));
      expect(entries.filter((e) => !e.replayed)).toHaveLength(1);
      expect((await ledger.account(T, PERIOD)).balance).toBe(entries[0]!.amount);
      expect(await ledger.ledger(T, 100)).toHaveLength(1);
    });

    // ------------------------------------------------------------ money invariant

    it(
      'money invariant: balance never below what requests hold, held = open holds, grants - deducts - balance = charges = usage cost',
      async () => {
        type Op =
          | { kind: 'grant'; amount: number; reuse: boolean }
          | { kind: 'deduct'; around: number; reuse: boolean }
          | { kind: 'reserve'; amount: number; ttl: number }
          | { kind: 'settle'; pick: number; percent: number }
          | { kind: 'settleUnknown'; charge: number }
          | { kind: 'release'; pick: number }
          | { kind: 'reap'; advanceSeconds: number }
          | { kind: 'lease'; pick: number; amount: number; headroom: number }
          | { kind: 'move'; pick: number; amount: number; reuse: boolean }
          | { kind: 'settleCommitted'; pick: number; amount: number; percent: number }
          | { kind: 'retire'; pick: number };
        const int = (min: number, max: number) => fc.integer({ min, max });
        const grantOp = fc.record({ kind: fc.constant('grant' as const), amount: int(1, 1_000), reuse: fc.boolean() });
        // Short holds (the reaper may take them) and long ones.
        const reserveOp = fc.record({
          kind: fc.constant('reserve' as const),
          amount: int(0, 600),
          ttl: fc.oneof(int(1, 120), fc.constant(3_600)),
        });
        // Charges up to twice the hold; settles of settled ids are the duplicates.
        const settleOp = fc.record({ kind: fc.constant('settle' as const), pick: fc.nat(), percent: int(0, 200) });
        // Deducts land around what is free of request holds, so both sides of the line come up.
        const deductOp = fc.record({ kind: fc.constant('deduct' as const), around: int(-200, 200), reuse: fc.boolean() });
        const op: fc.Arbitrary<Op> = fc.oneof(
          grantOp,
          deductOp,
          deductOp,
          reserveOp,
          reserveOp,
          settleOp,
          settleOp,
          fc.record({ kind: fc.constant('settleUnknown' as const), charge: int(0, 400) }),
          fc.record({ kind: fc.constant('release' as const), pick: fc.nat() }),
          fc.record({ kind: fc.constant('reap' as const), advanceSeconds: int(0, 90) }),
          fc.record({ kind: fc.constant('lease' as const), pick: int(0, 3), amount: int(1, 800), headroom: int(1, 4) }),
          fc.record({ kind: fc.constant('move' as const), pick: fc.nat(), amount: int(0, 300), reuse: fc.boolean() }),
          fc.record({ kind: fc.constant('move' as const), pick: fc.nat(), amount: int(0, 300), reuse: fc.boolean() }),
          fc.record({ kind: fc.constant('settleCommitted' as const), pick: fc.nat(), amount: int(0, 300), percent: int(0, 200) }),
          fc.record({ kind: fc.constant('retire' as const), pick: fc.nat() }),
        );
        let run = 0;

        await fc.assert(
          fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 40 }), async (ops) => {
            run += 1;
            const tenantId = `ten_prop_${run}_${randomBytes(3).toString('hex')}`;
            const base = { tenantId };
            let now = NOW;
            let grants = 0;
            let deducts = 0;
            let chargedTotal = 0;
            const grantKeys: Array<{ key: string; entry: LedgerEntry }> = [];
            const deductKeys: Array<{ key: string; entry: LedgerEntry }> = [];
            let leaseBlockUntil = 0; // a deduct met leased credit: no lease is granted before this
            const known: string[] = []; // every request id reserved (hold exists)
            const amounts = new Map<string, number>();
            const open = new Map<string, number>(); // requestId → expiresAt
            const charges = new Map<string, number>(); // requestId → charged (settled)
            const leases: string[] = []; // every lease id opened (its amount in `amounts`, open ones in `open`)
            const deadlines = new Map<string, number>(); // lease id → the most a renewal can reach

            const check = async (): Promise<void> => {
              const acc = await ledger.account(tenantId, PERIOD);
              expect(acc.balance).toBeGreaterThanOrEqual(0);
              let sum = 0;
              let leasedSum = 0;
              for (const id of open.keys()) {
                if (leases.includes(id)) leasedSum += amounts.get(id)!;
                else sum += amounts.get(id)!;
              }
              expect(acc.held).toBe(sum);
              expect(acc.leased).toBe(leasedSum);
              // Every open request is paid for, and so is whatever is committed inside a lease.
              expect(acc.balance).toBeGreaterThanOrEqual(acc.held + acc.leased);
              expect(acc.balance).toBe(grants - deducts - chargedTotal);
              expect(acc.spent).toBe(chargedTotal);
            };

            for (const o of ops) {
              switch (o.kind) {
                case 'grant': {
                  const prior = grantKeys[o.amount % Math.max(grantKeys.length, 1)];
                  if (o.reuse && prior !== undefined) {
                    const again = await ledger.adjustBalance(tenantId, o.amount, prior.key, 'again', now);
                    expect(again).toStrictEqual({ ...prior.entry, replayed: true });
                  } else {
                    const key = `g_${grantKeys.length}`;
                    const entry = await ledger.adjustBalance(tenantId, o.amount, key, 'grant', now);
                    grantKeys.push({ key, entry });
                    grants += o.amount;
                  }
                  break;
                }
                case 'deduct': {
                  const prior = deductKeys[Math.abs(o.around) % Math.max(deductKeys.length, 1)];
                  if (o.reuse && prior !== undefined) {
                    const again = await ledger.adjustBalance(tenantId, prior.entry.amount, prior.key, 'again', now);
                    expect(again).toStrictEqual({ ...prior.entry, replayed: true });
                    break;
                  }
                  const acc = await ledger.account(tenantId, PERIOD);
                  // Around the line of what requests hold, or of that and the leases.
                  const line = Math.abs(o.around) % 2 === 0 ? acc.held : acc.held + acc.leased;
                  const amount = Math.max(1, acc.balance - line + o.around);
                  const key = `d_${deductKeys.length}`;
                  if (acc.balance - amount < acc.held + acc.leased) {
                    const err = await ledger.adjustBalance(tenantId, -amount, key, 'deduct', now).catch((e: unknown) => e);
                    expect(err).toBeInstanceOf(InsufficientBalanceError);
                    const leasedInTheWay = acc.balance - amount >= acc.held;
                    expect((err as InsufficientBalanceError).leased).toBe(leasedInTheWay);
                    if (leasedInTheWay) leaseBlockUntil = now + LEASE_BLOCK_MS;
                    break;
                  }
                  const entry = await ledger.adjustBalance(tenantId, -amount, key, 'deduct', now);
                  deductKeys.push({ key, entry });
                  deducts += amount;
                  break;
                }
                case 'reserve': {
                  const r = `r_${known.length}_${randomBytes(4).toString('hex')}`;
                  const acc = await ledger.account(tenantId, PERIOD);
                  const outcome = await ledger.reserve(
                    reserveInput(r, { ...base, amount: o.amount, holdTtlSeconds: o.ttl, now }),
                  );
                  if (acc.balance - acc.held - acc.leased >= o.amount) expect(outcome).toEqual(OK);
                  else expect(outcome).toEqual(refused('insufficient_credit'));
                  if (outcome.ok) {
                    known.push(r);
                    amounts.set(r, o.amount);
                    open.set(r, now + o.ttl * 1_000);
                    // An immediate replay changes nothing.
                    expect(await ledger.reserve(reserveInput(r, { ...base, amount: o.amount, now }))).toEqual(
                      REPLAY,
                    );
                  }
                  break;
                }
                case 'settle': {
                  const r = known[o.pick % Math.max(known.length, 1)];
                  if (r === undefined) break;
                  const amount = amounts.get(r)!;
                  const charge = Math.floor((amount * o.percent) / 100);
                  const wasOpen = open.has(r);
                  const acc = await ledger.account(tenantId, PERIOD);
                  const outcome = await ledger.settle(settleInput(r, charge, { ...base, now }));
                  const first = charges.get(r);
                  if (first !== undefined) {
                    expect(outcome).toStrictEqual(settled(false, first, 0));
                  } else {
                    const expected = wasOpen
                      ? Math.min(charge, amount)
                      : Math.min(charge, Math.max(acc.balance - acc.held - acc.leased, 0));
                    expect(outcome).toStrictEqual(settled(true, expected, charge - expected));
                    charges.set(r, expected);
                    open.delete(r);
                    chargedTotal += expected;
                  }
                  break;
                }
                case 'settleUnknown': {
                  const r = `u_${known.length}_${randomBytes(4).toString('hex')}`;
                  const acc = await ledger.account(tenantId, PERIOD);
                  const outcome = await ledger.settle(settleInput(r, o.charge, { ...base, now }));
                  const expected = Math.min(o.charge, Math.max(acc.balance - acc.held - acc.leased, 0));
                  expect(outcome).toStrictEqual(settled(true, expected, o.charge - expected));
                  charges.set(r, expected);
                  known.push(r);
                  amounts.set(r, 0);
                  chargedTotal += expected;
                  break;
                }
                case 'release': {
                  const r = known[o.pick % Math.max(known.length, 1)];
                  if (r === undefined) break;
                  expect(await ledger.release(tenantId, r)).toBe(open.has(r));
                  open.delete(r);
                  break;
                }
                case 'lease': {
                  const id = `lease_${o.pick}`;
                  const acc = await ledger.account(tenantId, PERIOD);
                  const outcome = await ledger.extendLease(leaseInput(id, { ...base, amount: o.amount, minimum: 1, headroom: o.headroom, now }));
                  const seen = leases.includes(id);
                  if (seen && (!open.has(id) || deadlines.get(id)! <= now)) {
                    expect(outcome).toStrictEqual({ granted: 0, total: open.has(id) ? amounts.get(id)! : 0, gone: true });
                    break;
                  }
                  const want = Math.min(o.amount, Math.floor((acc.balance - acc.held - acc.leased) / o.headroom));
                  const total = seen && open.has(id) ? amounts.get(id)! : 0;
                  if (want < 1 || now < leaseBlockUntil) {
                    expect(outcome).toStrictEqual({ granted: 0, total, gone: false });
                    break;
                  }
                  expect(outcome).toStrictEqual({ granted: want, total: total + want, gone: false });
                  if (!seen) {
                    leases.push(id);
                    deadlines.set(id, now + 120_000);
                  }
                  amounts.set(id, total + want);
                  open.set(id, Math.min(now + 30_000, deadlines.get(id)!));
                  break;
                }
                case 'move': {
                  const lease = leases[o.pick % Math.max(leases.length, 1)];
                  if (lease === undefined) break;
                  const prior = known[o.pick % Math.max(known.length, 1)];
                  const r = o.reuse && prior !== undefined ? prior : `m_${known.length}_${randomBytes(4).toString('hex')}`;
                  const outcome = await ledger.moveFromLease(moveInput(lease, r, o.amount, { ...base, now }));
                  if (known.includes(r)) expect(outcome).toBe('exists');
                  else if (!open.has(lease) || amounts.get(lease)! < o.amount) expect(outcome).toBe('no_lease');
                  else {
                    expect(outcome).toBe('moved');
                    amounts.set(lease, amounts.get(lease)! - o.amount);
                    known.push(r);
                    amounts.set(r, o.amount);
                    open.set(r, now + 15_000);
                  }
                  break;
                }
                case 'settleCommitted': {
                  // A request committed inside a lease (no hold of its own) settles out of it.
                  const lease = leases[o.pick % Math.max(leases.length, 1)];
                  if (lease === undefined) break;
                  const r = `c_${known.length}_${randomBytes(4).toString('hex')}`;
                  const charge = Math.floor((o.amount * o.percent) / 100);
                  const acc = await ledger.account(tenantId, PERIOD);
                  const outcome = await ledger.settle({ ...settleInput(r, charge, { ...base, now }), lease: { id: lease, amount: o.amount } });
                  const taken = open.has(lease) && amounts.get(lease)! >= o.amount;
                  const expected = taken ? Math.min(charge, o.amount) : Math.min(charge, Math.max(acc.balance - acc.held - acc.leased, 0));
                  expect(outcome).toStrictEqual({ ...settled(true, expected, charge - expected), leaseStale: !taken });
                  if (taken) amounts.set(lease, amounts.get(lease)! - o.amount);
                  known.push(r);
                  amounts.set(r, 0);
                  charges.set(r, expected);
                  chargedTotal += expected;
                  break;
                }
                case 'retire': {
                  const lease = leases[o.pick % Math.max(leases.length, 1)];
                  if (lease === undefined) break;
                  expect(await ledger.release(tenantId, lease)).toBe(open.has(lease));
                  open.delete(lease);
                  break;
                }
                case 'reap': {
                  now += o.advanceSeconds * 1_000;
                  let expired = 0;
                  for (const [r, expiresAt] of open) {
                    if (expiresAt <= now) {
                      open.delete(r);
                      expired += 1;
                    }
                  }
                  expect(await ledger.reapExpired(tenantId, now)).toBe(expired);
                  break;
                }
              }
              await check();
            }

            // Conservation: opening 0 + grants - closing = charges = usage cost.
            const acc = await ledger.account(tenantId, PERIOD);
            const entries = await ledger.ledger(tenantId, 100_000);
            const records = await ledger.usageRecords(tenantId, 100_000);
            const sum = (xs: number[]): number => xs.reduce((a, b) => a + b, 0);
            const chargeEntries = entries.filter((e) => e.type === 'charge');
            expect(sum(entries.filter((e) => e.type === 'grant').map((e) => e.amount))).toBe(grants);
            expect(0 - sum(entries.filter((e) => e.type === 'deduct').map((e) => e.amount))).toBe(deducts);
            const charged = 0 - sum(chargeEntries.map((e) => e.amount)); // 0 - x: no -0
            expect(0 + grants - deducts - acc.balance).toBe(charged);
            expect(charged).toBe(sum(records.map((r) => r.cost)));
            expect(sum(records.map((r) => r.cost))).toBe(chargedTotal);
            expect(chargeEntries.every((e) => e.amount < 0)).toBe(true);
            expect(records).toHaveLength(charges.size);
            // The balanceAfter chain adds up, oldest to newest.
            let running = 0;
            for (const e of [...entries].reverse()) {
              running += e.amount;
              expect(e.balanceAfter).toBe(running);
              expect(e.balanceAfter).toBeGreaterThanOrEqual(0);
            }
            expect(running).toBe(acc.balance);
            expect(new Set(entries.map((e) => e.id)).size).toBe(entries.length);
            const byDay = await ledger.usageByDay(tenantId, ...ALL_DAYS);
            expect(sum(byDay.map((d) => d.cost))).toBe(chargedTotal);
            expect(sum(byDay.map((d) => d.requests))).toBe(charges.size);
            expect((await ledger.tenantsWithHolds()).includes(tenantId)).toBe(open.size > 0);
          }),
          { numRuns: options.propertyRuns ?? 100 },
        );
      },
      120_000,
    );

    // ------------------------------------------------------------ close

    it('after close every call rejects with StoreUnavailableError', async () => {
      await grant(ledger, 100);
      await ledger.close();
      await ledger.close(); // idempotent
      const calls: Array<() => Promise<unknown>> = [
        () => ledger.reserve(reserveInput(rid())),
        () => ledger.settle(settleInput(rid(), 1)),
        () => ledger.release(T, 'req_x'),
        () => ledger.reapExpired(T, NOW),
        () => ledger.renewLeases(T, ['req_x'], NOW, 5),
        () => ledger.tenantsWithHolds(),
        () => ledger.account(T, PERIOD),
        () => ledger.adjustBalance(T, 5, 'k_closed', 'closed', NOW),
        () => ledger.setCap(T, 5),
        () => ledger.ledger(T, 10),
        () => ledger.usageRecords(T, 10),
        () => ledger.usageByDay(T, ...ALL_DAYS),
      ];
      for (const call of calls) await expect(call()).rejects.toBeInstanceOf(StoreUnavailableError);
    });
  });
}

// ---------------------------------------------------------------- memory

describeLedgerContract('memory', () => createMemoryLedger());

describe('memory ledger: bounded history (it lives in the sidecar heap)', () => {
  /** Settles `n` requests nobody held (a charge, a usage record and a finished hold each), `stepMs` apart from `from`. */
  async function settleMany(ledger: Ledger, n: number, from: number, stepMs = 0, prefix = 'r'): Promise<void> {
    for (let i = 0; i < n; i++) await ledger.settle(settleInput(`${prefix}_${i}`, 1, { now: from + i * stepMs }));
  }

  it('keeps at most maxRecords usage records and ledger entries per tenant, the newest, and at most maxFinishedHolds finished holds', async () => {
    const ledger = createMemoryLedger({ maxRecords: 40, maxFinishedHolds: 100 });
    await grant(ledger, 1_000_000);
    await grant(ledger, 1, 'ten_other');
    await settleMany(ledger, 500, NOW);
    const records = await ledger.usageRecords(T, 10_000);
    expect(records.length).toBeGreaterThanOrEqual(40);
    expect(records.length).toBeLessThanOrEqual(45); // an eighth over the limit at most (amortised trim)
    expect(records[0]!.requestId).toBe('r_499'); // newest first: the newest are the ones kept
    const entries = await ledger.ledger(T, 10_000);
    expect(entries.length).toBeLessThanOrEqual(45);
    expect(entries[0]!.requestId).toBe('r_499');
    // Balances and totals are not history: all 500 charges count.
    expect(await ledger.account(T, PERIOD)).toMatchObject({ balance: 1_000_000 - 500, spent: 500 });
    expect((await ledger.usageByDay(T, DAY, DAY)).reduce((sum, d) => sum + d.requests, 0)).toBe(500);
    // A recent request is still remembered (a repeated settlement changes nothing) ...
    expect(await ledger.settle(settleInput('r_480', 1))).toStrictEqual(settled(false, 1, 0));
    // ... one beyond the last maxFinishedHolds (+ an eighth) is forgotten and counts as new.
    expect((await ledger.settle(settleInput('r_0', 1))).applied).toBe(true);
    // Another tenant's history is its own.
    expect(await ledger.ledger('ten_other', 10)).toHaveLength(1);
  });

  it('trims usage records and ledger entries by their retention, and forgets finished holds after 7 days', async () => {
    const ledger = createMemoryLedger({ retention: { usageRecordMs: 60_000, ledgerMs: 120_000 } });
    await grant(ledger, 1_000_000);
    await settleMany(ledger, 10, NOW, 0, 'old');
    // 1,000 writes later (the trim runs every 1,000), 90 s on: past the usage retention, not the ledger's.
    await settleMany(ledger, 1_000, NOW + 90_000, 0, 'mid');
    const usage = await ledger.usageRecords(T, 100_000);
    expect(usage.some((r) => r.requestId.startsWith('old_'))).toBe(false);
    const entries = await ledger.ledger(T, 100_000);
    expect(entries.filter((e) => e.requestId?.startsWith('old_'))).toHaveLength(10);
    // Past the ledger retention and the 7 days a finished hold is remembered.
    await settleMany(ledger, 1_000, NOW + 8 * 86_400_000, 0, 'new');
    expect((await ledger.ledger(T, 100_000)).some((e) => e.requestId?.startsWith('old_') || e.requestId?.startsWith('mid_'))).toBe(false);
    expect((await ledger.settle(settleInput('mid_5', 1, { now: NOW + 8 * 86_400_000 }))).applied).toBe(true);
    expect(await ledger.settle(settleInput('new_5', 1, { now: NOW + 8 * 86_400_000 }))).toStrictEqual(settled(false, 1, 0));
  });

  it('trims down to the limit exactly once a list is an eighth over it; an entry exactly at the retention cutoff stays', async () => {
    const ledger = createMemoryLedger({ maxRecords: 8, retention: { usageRecordMs: 1_000, ledgerMs: 100_000 } });
    await grant(ledger, 1_000_000);
    await settleMany(ledger, 9, NOW); // 9 records: within 8 + 1
    expect(await ledger.usageRecords(T, 100)).toHaveLength(9);
    await settleMany(ledger, 1, NOW, 0, 'tenth'); // 10 > 9: back to the newest 8
    const kept = await ledger.usageRecords(T, 100);
    expect(kept.map((r) => r.requestId)).toEqual(['tenth_0', 'r_8', 'r_7', 'r_6', 'r_5', 'r_4', 'r_3', 'r_2']);
    expect(await ledger.ledger(T, 100)).toHaveLength(8);
    // Retention: a record exactly at the cutoff stays; a millisecond later it goes. (The finished
    // holds' limit of 1 makes every third settlement run the trim.)
    const fresh = createMemoryLedger({ maxRecords: 10, maxFinishedHolds: 1, retention: { usageRecordMs: 1_000, ledgerMs: 1_000 } });
    await grant(fresh, 1_000);
    const at = async (rid: string, now: number) => fresh.settle(settleInput(rid, 1, { now }));
    await at('a', NOW);
    await at('b', NOW + 500);
    await at('c', NOW + 1_000); // trims with the cutoff at NOW: a stays
    expect((await fresh.usageRecords(T, 10)).map((r) => r.requestId)).toEqual(['c', 'b', 'a']);
    await at('d', NOW + 1_001);
    await at('e', NOW + 1_001); // trims with the cutoff at NOW + 1: a goes
    expect((await fresh.usageRecords(T, 10)).map((r) => r.requestId)).toEqual(['e', 'd', 'c', 'b']);
  });

  it('refuses a limit below one', () => {
    expect(() => createMemoryLedger({ maxRecords: 0 })).toThrow(TypeError);
    expect(() => createMemoryLedger({ maxFinishedHolds: 1.5 })).toThrow(TypeError);
    expect(() => createMemoryLedger({ maxRecords: 1, maxFinishedHolds: 1 })).not.toThrow();
    expect(() => createMemoryLedger({ retention: { usageRecordMs: 0, ledgerMs: 1 } })).toThrow(TypeError);
  });
});

// ---------------------------------------------------------------- redis

describe('redis', () => {
  let server: RedisServer;

  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(async () => {
    await server?.stop();
  });

  describeLedgerContract('redis', () => createRedisLedger({ url: server.url, prefix: uniquePrefix() }), {
    propertyRuns: 30,
  });

  it('together holds the commands it issues in the socket and sends them in one write when it returns', async () => {
    const ledger = createRedisLedger({ url: server.url, prefix: uniquePrefix() });
    // What each uncork finds: the socket still corked once, with the commands buffered in it.
    const seen: Array<{ corked: number; buffered: number }> = [];
    const uncork = vi.spyOn(Socket.prototype, 'uncork').mockImplementation(function (this: Socket) {
      seen.push({ corked: this.writableCorked, buffered: this.writableLength });
      Writable.prototype.uncork.call(this);
    });
    try {
      await ledger.account(T, PERIOD); // connected
      const a = rid();
      const b = rid();
      let pending: Promise<unknown>[] = [];
      ledger.together!(() => {
        pending = [ledger.settle(settleInput(a, 0)), ledger.settle(settleInput(b, 0)), ledger.account(T, PERIOD)];
      });
      expect(seen).toHaveLength(1);
      expect(seen[0]!.corked).toBe(1);
      expect(seen[0]!.buffered).toBeGreaterThan(0);
      const [sa, sb, account] = await Promise.all(pending);
      expect([sa, sb]).toStrictEqual([settled(true, 0, 0), settled(true, 0, 0)]);
      expect(account).toMatchObject({ held: 0 });
    } finally {
      uncork.mockRestore();
      await ledger.close();
    }
  });

  describe("together: a block's settlements leave as one script per tenant", () => {
    /** Scripts Redis ran (EVALSHA and EVAL calls, failed ones included), from INFO commandstats. */
    async function scriptCalls(raw: Redis): Promise<number> {
      const info = await raw.info('commandstats');
      let calls = 0;
      for (const m of info.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)) calls += Number(m[1]);
      return calls;
    }

    it('one script per tenant, at most 32 settlements each, every settlement its own outcome, the books as if each had run alone', async () => {
      const prefix = uniquePrefix();
      const ledger = createRedisLedger({ url: server.url, prefix });
      const raw = new Redis(server.url);
      try {
        const [t1, t2] = [`ten_batch_${rid()}`, `ten_batch_${rid()}`];
        await grant(ledger, 100_000, t1);
        await grant(ledger, 100_000, t2);
        // Load the batch script once (a first EVALSHA answers NOSCRIPT and ioredis resends it as EVAL).
        const warm = [rid(), rid()];
        ledger.together!(() => void Promise.all(warm.map((id) => ledger.settle(settleInput(id, 1, { tenantId: t2, creditCheck: false })))));
        const first = [rid(), rid(), rid()];
        const many = Array.from({ length: 40 }, () => rid());
        for (const id of [...first, ...many]) await ledger.reserve(reserveInput(id, { tenantId: t1, amount: 100 }));
        await new Promise((r) => setTimeout(r, 50));
        const before = await scriptCalls(raw);
        let outcomes: Promise<SettleOutcome>[] = [];
        ledger.together!(() => {
          outcomes = [
            ...first.map((id) => ledger.settle(settleInput(id, 30, { tenantId: t1 }))),
            ledger.settle(settleInput(first[0]!, 99, { tenantId: t1 })), // a replay inside the same script
            ledger.settle(settleInput(rid(), 7, { tenantId: t2, creditCheck: false })),
            ...many.map((id) => ledger.settle(settleInput(id, 10, { tenantId: t1 }))),
          ];
        });
        const got = await Promise.all(outcomes);
        expect(got.slice(0, 5)).toStrictEqual([settled(true, 30, 0), settled(true, 30, 0), settled(true, 30, 0), settled(false, 30, 0), settled(true, 7, 0)]);
        expect(got.slice(5)).toStrictEqual(many.map(() => settled(true, 10, 0)));
        // t1: 44 settlements in two scripts (32 + 12), t2: one.
        expect((await scriptCalls(raw)) - before).toBe(3);
        expect(await ledger.account(t1, PERIOD)).toMatchObject({ balance: 100_000 - 90 - 400, held: 0, spent: 490 });
        expect((await ledger.usageRecords(t1, 100)).map((u) => u.requestId).sort()).toEqual([...first, ...many].sort());
      } finally {
        raw.disconnect();
        await ledger.close();
      }
    });

    it('a settlement that fails inside the script fails alone: the others of its script are applied', async () => {
      const prefix = uniquePrefix();
      const ledger = createRedisLedger({ url: server.url, prefix });
      const raw = new Redis(server.url);
      try {
        const t = `ten_batch_${rid()}`;
        await grant(ledger, 1_000, t);
        const ids = [rid(), rid(), rid()];
        for (const id of ids) await ledger.reserve(reserveInput(id, { tenantId: t, amount: 100 }));
        // The middle one's hold is not a hash: its script's first command fails (WRONGTYPE).
        await raw.del(`${prefix}:hold:{${t}}:${ids[1]!}`);
        await raw.set(`${prefix}:hold:{${t}}:${ids[1]!}`, 'not a hold');
        let outcomes: Promise<SettleOutcome>[] = [];
        ledger.together!(() => {
          outcomes = ids.map((id) => ledger.settle(settleInput(id, 40, { tenantId: t })));
        });
        const [a, b, c] = await Promise.allSettled(outcomes);
        expect(a).toStrictEqual({ status: 'fulfilled', value: settled(true, 40, 0) });
        expect(c).toStrictEqual({ status: 'fulfilled', value: settled(true, 40, 0) });
        expect(b?.status).toBe('rejected');
        // Not "the store is away" (which the journal retries): this input fails wherever it runs, as it would alone.
        const reason = (b as PromiseRejectedResult).reason as Error;
        expect(reason).not.toBeInstanceOf(StoreUnavailableError);
        expect(reason.message).toMatch(/WRONGTYPE/);
        expect((await ledger.usageRecords(t, 10)).map((u) => u.requestId).sort()).toEqual([ids[0], ids[2]].sort());
      } finally {
        raw.disconnect();
        await ledger.close();
      }
    });

    it('Redis away: every settlement of the block fails as unavailable (the journal retries each)', async () => {
      const ledger = createRedisLedger({ url: 'redis://127.0.0.1:1', prefix: uniquePrefix(), connectTimeoutMs: 200 });
      try {
        let outcomes: Promise<SettleOutcome>[] = [];
        ledger.together!(() => {
          outcomes = [rid(), rid(), rid()].map((id) => ledger.settle(settleInput(id, 5)));
        });
        for (const r of await Promise.allSettled(outcomes)) {
          expect(r.status).toBe('rejected');
          expect((r as PromiseRejectedResult).reason).toBeInstanceOf(StoreUnavailableError);
        }
      } finally {
        await ledger.close();
      }
    });
  });

  describe('retention and the hold index', () => {
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    let raw: Redis;
    beforeAll(() => {
      raw = new Redis(server.url);
    });
    afterAll(() => raw?.disconnect());

    it('trims usage records and ledger entries older than the retention as new ones are written', async () => {
      const prefix = uniquePrefix();
      const usage = `${prefix}:usage:{${T}}`;
      const entries = `${prefix}:ledger:{${T}}`;
      // The 251 first entries must still be younger than this when counted (the 250 writes, a 0.7 s sleep
      // and the count): 2 s leaves a loaded box more than a second of slack.
      const retention = 2_000;
      const ledger = createRedisLedger({ url: server.url, prefix, retention: { usageRecordMs: retention, ledgerMs: retention } });
      try {
        // 250 entries span whole stream nodes (100 entries each by default): approximate trimming drops those.
        for (let i = 0; i < 250; i++) await ledger.settle(settleInput(rid(), 1, { creditCheck: false }));
        await sleep(700);
        await ledger.settle(settleInput(rid(), 1, { creditCheck: false })); // keeps the streams alive
        expect(await raw.xlen(usage)).toBe(251);
        expect(await raw.xlen(entries)).toBe(251);
        await sleep(1_400); // the first 250 are more than the retention old now, the one above is not
        const last = rid();
        await ledger.settle(settleInput(last, 1, { creditCheck: false }));
        // The first 200 (two full nodes) are older than the retention now.
        expect(await raw.xlen(usage)).toBeLessThanOrEqual(52);
        expect(await raw.xlen(entries)).toBeLessThanOrEqual(52);
        expect((await ledger.usageRecords(T, 1))[0]?.requestId).toBe(last);
        // A stream nobody writes to expires after the retention.
        expect(await raw.pttl(usage)).toBeGreaterThan(0);
        expect(await raw.pttl(usage)).toBeLessThanOrEqual(retention);
        await sleep(retention + 100);
        expect(await raw.exists(usage, entries)).toBe(0);
        // The balance is not a stream: it stays.
        expect((await ledger.account(T, PERIOD)).balance).toBe(-252);
      } finally {
        await ledger.close();
      }
    });

    it('grants and deducts are trimmed by the ledger retention too', async () => {
      const prefix = uniquePrefix();
      const ledger = createRedisLedger({ url: server.url, prefix, retention: { usageRecordMs: 60_000, ledgerMs: 60_000 } });
      try {
        await grant(ledger, 1_000);
        expect(await raw.pttl(`${prefix}:ledger:{${T}}`)).toBeGreaterThan(50_000);
        expect(await raw.pttl(`${prefix}:ledger:{${T}}`)).toBeLessThanOrEqual(60_000);
      } finally {
        await ledger.close();
      }
    });

    it('finds tenants with holds through an index (no SCAN) and drops entries that ran out with no hold left', async () => {
      const prefix = uniquePrefix();
      const ledger = createRedisLedger({ url: server.url, prefix });
      try {
        await grant(ledger, 1_000, 'ten_x');
        const r = rid();
        await ledger.reserve(reserveInput(r, { tenantId: 'ten_x', now: Date.now() }));
        expect(await raw.zrange(`${prefix}:holding`, '0', '-1')).toEqual(['ten_x']);
        expect(await ledger.tenantsWithHolds()).toEqual(['ten_x']);
        await ledger.release('ten_x', r);
        // Released, but the indexed deadline is still ahead: kept (a reserve may be on its way).
        expect(await ledger.tenantsWithHolds()).toEqual([]);
        expect(await raw.zrange(`${prefix}:holding`, '0', '-1')).toEqual(['ten_x']);
        // Past the deadline with no hold: dropped.
        expect(await ledger.reserve(reserveInput(rid(), { tenantId: 'ten_y', now: NOW, creditCheck: false }))).toEqual(OK);
        await raw.zadd(`${prefix}:holding`, NOW, 'ten_x');
        expect(await ledger.tenantsWithHolds()).toEqual(['ten_y']);
        expect(await raw.zrange(`${prefix}:holding`, '0', '-1')).toEqual(['ten_y']);
      } finally {
        await ledger.close();
      }
    });
  });
});

// ---------------------------------------------------------------- redis cluster

describe('redis cluster', () => {
  let cluster: RedisCluster;

  beforeAll(async () => {
    cluster = await startRedisCluster();
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  describeLedgerContract('redis cluster', () => createRedisLedger({ clusterNodes: cluster.urls, prefix: uniquePrefix() }), {
    propertyRuns: 30,
  });

  it('a settlement no replica acknowledged is reported unavailable (so the journal retries it) and a retry applies it once', async () => {
    // This cluster has no replicas: WAIT 1 can never be satisfied.
    const ledger = createRedisLedger({ clusterNodes: cluster.urls, prefix: uniquePrefix(), replicaAcks: 1 });
    const plain = createRedisLedger({ clusterNodes: cluster.urls, prefix: uniquePrefix() });
    try {
      const r = rid();
      await expect(ledger.settle(settleInput(r, 5, { creditCheck: false }))).rejects.toBeInstanceOf(StoreUnavailableError);
      // Written on the master all the same, and said so (a journal round goes on past it).
      await expect(ledger.settle(settleInput(r, 5, { creditCheck: false }))).rejects.toBeInstanceOf(NotReplicatedError);
      expect((await ledger.usageRecords(T, 10)).map((u) => u.requestId)).toEqual([r]);
      expect((await ledger.account(T, PERIOD)).balance).toBe(-5);
      // Without the requirement the same call succeeds.
      expect((await plain.settle(settleInput(rid(), 5, { creditCheck: false }))).applied).toBe(true);
    } finally {
      await ledger.close();
      await plain.close();
    }
  });
});
