/**
 * In-process money ledger (the embedded default). Same observable semantics as
 * the Redis ledger, checked by the shared ledger contract suite:
 *
 * Per tenant it keeps the balance, `held` (sum of open holds), the spend cap,
 * spent per period, holds by request id, throttling counters per
 * (scope, minute), the ledger, the usage records and usage by (day, alias).
 *
 * - reserve: a request id seen before (hold in any state) answers
 *   `{ ok: true, replay: true }` and changes nothing. Otherwise it checks, in
 *   this order, throttling (requests, then tokens; null limit = unlimited), the
 *   spend cap (`spent[period] + held + amount > cap`) and, when asked, credit
 *   (`balance - held < amount`); a refusal changes nothing (counters included).
 * - settle: once per request id. An open hold covers at most its amount (the
 *   rest is `uncovered`); without an open hold (none, released or reaped) the
 *   charge is taken from the available balance when the credit check is on,
 *   in full otherwise (the balance may go negative). Every applied settle
 *   records usage; a ledger entry is written only when money moves.
 * - extendLease opens or grows a lease (a hold named by its lease id) by at
 *   most the room / headroom; moveFromLease turns a piece of an open lease into
 *   a request's own open hold (held does not change).
 * - release / reapExpired give open holds back; adjustBalance is idempotent by
 *   key; a deduct never takes the balance below what open requests hold.
 * - inputs are validated (`TypeError`), results are fresh copies, and after
 *   close() every method rejects with `StoreUnavailableError`.
 * - history is bounded as in Redis: usage records and ledger entries go once
 *   older than their retention, a finished hold (settled, released) is
 *   forgotten FINISHED_HOLD_MS after it finished; and, since all of it lives in
 *   the sidecar's heap, at most `maxRecords` usage records and ledger entries
 *   and `maxFinishedHolds` finished holds are kept per tenant (the oldest go
 *   first). "Now" is the latest instant any operation was given.
 *
 * Every method is async and runs its whole read-modify-write synchronously,
 * so each operation is atomic with respect to the others.
 */
import { StoreUnavailableError } from './contract.js';
import { checkRetention, DEFAULT_RETENTION, FINISHED_HOLD_MS, type StreamRetention } from './retention.js';
import { checkAdjust, checkLease, checkListing, checkMove, checkRenew, checkReserve, checkSettle, day, instant, nonEmpty, nonNegativeInteger } from './ledger-input.js';
import {
  type AccountState,
  type Ledger,
  type LedgerEntry,
  type RateLimits,
  type ReserveInput,
  type ReserveOutcome,
  type SettleInput,
  type SettleOutcome,
  type UsageDay,
  type UsageRecord,
  InsufficientBalanceError,
  LEASE_BLOCK_MS,
  type LeaseCommitment,
} from './ledger-contract.js';

type HoldState = 'held' | 'settled' | 'released';

interface Hold {
  amount: number;
  state: HoldState;
  /** End of the lease (renewLeases moves it, never past deadline). */
  expiresAt: number;
  deadline: number;
  owner: string;
  period: string;
  keyId: string | null;
  charged: number;
  /** Taken over by the response processing (see Ledger.claim). */
  claimed?: boolean;
  /** A credit lease (its amount also counts in the tenant's `leased`). */
  lease?: boolean;
  /** A lease's generation: stale once the tenant's leaseGen moved on. */
  gen?: number;
}

interface Counters {
  requests: number;
  tokens: number;
}

interface TenantState {
  balance: number;
  /** Every open hold, leases included (what the credit check and the cap count). */
  held: number;
  /** The open leases' part of held. */
  leased: number;
  /** Raised by a cap change: leases granted before are stale. */
  leaseGen: number;
  /** No lease is granted before this instant (a deduct found leased credit in its way). */
  leaseBlockUntil: number;
  cap: number | null;
  readonly spent: Map<string, number>;
  readonly holds: Map<string, Hold>;
  /** Request ids whose hold is in state 'held'. */
  readonly open: Set<string>;
  /** minute → scope id → counters. */
  readonly rate: Map<number, Map<string, Counters>>;
  /** Oldest first. */
  readonly ledger: LedgerEntry[];
  /** Oldest first. */
  readonly usage: UsageRecord[];
  /** `${day}\0${alias}` → aggregate. */
  readonly byDay: Map<string, UsageDay>;
  /** idempotency key → the entry written the first time. */
  readonly adjustments: Map<string, LedgerEntry>;
  seq: number;
  /** When each ledger entry and usage record was written, oldest first (for trimming). */
  readonly ledgerAt: number[];
  readonly usageAt: number[];
  /** Holds that finished (settled, released), oldest first, and when. */
  readonly finished: string[];
  readonly finishedAt: number[];
  /** Records written since the last trim. */
  sinceTrim: number;
}

export interface MemoryLedgerOptions {
  /** Usage records and ledger entries older than this are trimmed (default: the configuration's defaults). */
  readonly retention?: StreamRetention;
  /** Per tenant, at most this many usage records and this many ledger entries are kept (default 5,000 each). */
  readonly maxRecords?: number;
  /**
   * Per tenant, at most this many finished holds are remembered (default 10,000): a settlement,
   * release or reserve repeated for a request id forgotten since counts as new.
   */
  readonly maxFinishedHolds?: number;
}

/** The trim runs after this many records (or once a list is an eighth over its limit): amortised, like Redis's `MINID ~`. */
const TRIM_EVERY = 1_000;

/** A list an eighth over its limit is trimmed at once, before TRIM_EVERY writes. */
const over = (list: readonly unknown[], max: number): boolean => list.length > max + Math.ceil(max / 8);

/** Drops the oldest items while over `max` or older than `cutoff`; returns them. */
function trimOldest<T>(items: T[], at: number[], max: number, cutoff: number): T[] {
  let k = 0;
  const excess = items.length - max;
  while (k < items.length && (k < excess || (at[k] as number) < cutoff)) k += 1;
  at.splice(0, k);
  return items.splice(0, k);
}

// ---------------------------------------------------------------- copies

function copyEntry(e: LedgerEntry): LedgerEntry {
  return {
    id: e.id,
    time: e.time,
    type: e.type,
    amount: e.amount,
    balanceAfter: e.balanceAfter,
    requestId: e.requestId,
    reason: e.reason,
  };
}

function copyUsage(r: UsageRecord): UsageRecord {
  return { ...r };
}

function copyDay(d: UsageDay): UsageDay {
  return { ...d };
}

function newestFirst<T>(items: readonly T[], limit: number, copy: (item: T) => T): T[] {
  const out: T[] = [];
  for (let i = items.length - 1; i >= 0 && out.length < limit; i--) out.push(copy(items[i]!));
  return out;
}

// ---------------------------------------------------------------- ledger

export function createMemoryLedger(opts: MemoryLedgerOptions = {}): Ledger {
  const retention = checkRetention(opts.retention ?? DEFAULT_RETENTION);
  const maxRecords = opts.maxRecords ?? 5_000;
  const maxFinishedHolds = opts.maxFinishedHolds ?? 10_000;
  for (const n of [maxRecords, maxFinishedHolds]) {
    if (!Number.isSafeInteger(n) || n < 1) throw new TypeError('maxRecords and maxFinishedHolds must be whole numbers >= 1');
  }
  const tenants = new Map<string, TenantState>();
  let closed = false;
  /** The latest instant an operation was given (release and claim take none). */
  let clock = 0;
  const at = (now: number): number => (clock = Math.max(clock, now));

  function open(): void {
    if (closed) throw new StoreUnavailableError(new Error('memory ledger is closed'));
  }

  function state(tenantId: string): TenantState {
    let t = tenants.get(tenantId);
    if (t === undefined) {
      t = {
        balance: 0,
        held: 0,
        leased: 0,
        leaseGen: 0,
        leaseBlockUntil: 0,
        cap: null,
        spent: new Map(),
        holds: new Map(),
        open: new Set(),
        rate: new Map(),
        ledger: [],
        usage: [],
        byDay: new Map(),
        adjustments: new Map(),
        seq: 0,
        ledgerAt: [],
        usageAt: [],
        finished: [],
        finishedAt: [],
        sinceTrim: 0,
      };
      tenants.set(tenantId, t);
    }
    return t;
  }

  function append(t: TenantState, entry: Omit<LedgerEntry, 'id'>): LedgerEntry {
    t.seq += 1;
    const stored: LedgerEntry = { id: String(t.seq), ...entry };
    t.ledger.push(stored);
    t.ledgerAt.push(clock);
    written(t);
    return stored;
  }

  function recordUsage(t: TenantState, record: UsageRecord): void {
    t.usage.push(record);
    t.usageAt.push(clock);
    written(t);
  }

  /** A hold left 'held' (or was written finished): remembered for replays for a while. */
  function finishedHold(t: TenantState, requestId: string): void {
    t.finished.push(requestId);
    t.finishedAt.push(clock);
    written(t);
  }

  function written(t: TenantState): void {
    t.sinceTrim += 1;
    if (t.sinceTrim < TRIM_EVERY && !over(t.usage, maxRecords) && !over(t.ledger, maxRecords) && !over(t.finished, maxFinishedHolds)) return;
    t.sinceTrim = 0;
    trimOldest(t.usage, t.usageAt, maxRecords, clock - retention.usageRecordMs);
    trimOldest(t.ledger, t.ledgerAt, maxRecords, clock - retention.ledgerMs);
    for (const requestId of trimOldest(t.finished, t.finishedAt, maxFinishedHolds, clock - FINISHED_HOLD_MS)) if (t.holds.get(requestId)?.state !== 'held') t.holds.delete(requestId);
  }

  /** A request that never had a hold: a later reserve or move for it finds it taken and holds nothing. */
  function tombstone(t: TenantState, requestId: string): void {
    t.holds.set(requestId, { amount: 0, state: 'released', expiresAt: 0, deadline: 0, owner: '', period: '', keyId: null, charged: 0 });
    finishedHold(t, requestId);
  }

  /**
   * Takes a request's commitment out of its credit lease (the settlement then treats it as
   * the request's hold). Not taken when the lease is gone or too small; stale either way
   * when it is not the lease of the tenant's current generation.
   */
  function takeCommitment(t: TenantState, c: LeaseCommitment): { taken: boolean; stale: boolean } {
    const lease = t.holds.get(c.id);
    if (lease?.state !== 'held' || lease.lease !== true || lease.amount < c.amount) return { taken: false, stale: true };
    lease.amount -= c.amount;
    t.leased -= c.amount;
    return { taken: true, stale: lease.gen !== t.leaseGen };
  }

  function releaseHold(t: TenantState, requestId: string, hold: Hold): void {
    t.held -= hold.amount;
    if (hold.lease === true) t.leased -= hold.amount;
    hold.state = 'released';
    t.open.delete(requestId);
    finishedHold(t, requestId);
  }

  /** Counters of the minute, dropping minutes that can no longer matter. */
  function counters(t: TenantState, minute: number, scopeId: string): Counters {
    for (const m of t.rate.keys()) if (m < minute - 1) t.rate.delete(m);
    let scopes = t.rate.get(minute);
    if (scopes === undefined) {
      scopes = new Map();
      t.rate.set(minute, scopes);
    }
    let c = scopes.get(scopeId);
    if (c === undefined) {
      c = { requests: 0, tokens: 0 };
      scopes.set(scopeId, c);
    }
    return c;
  }

  function peekCounters(t: TenantState | undefined, minute: number, scopeId: string): Counters {
    return t?.rate.get(minute)?.get(scopeId) ?? { requests: 0, tokens: 0 };
  }

  return {
    inProcess: true,
    async reserve(raw): Promise<ReserveOutcome> {
      open();
      const input = checkReserve(raw);
      at(input.now);
      const existing = tenants.get(input.tenantId);
      if (existing?.holds.has(input.requestId) === true) return { ok: true, replay: true };

      const balance = existing?.balance ?? 0;
      const held = existing?.held ?? 0;
      const cap = existing?.cap ?? null;
      const limits = input.limits;
      if (limits !== null) {
        const c = peekCounters(existing, input.minute, limits.scopeId);
        if (limits.requestsPerMinute !== null && c.requests + 1 > limits.requestsPerMinute) {
          return { ok: false, reason: 'rate_limit_exceeded' };
        }
        if (limits.tokensPerMinute !== null && c.tokens + input.tokens > limits.tokensPerMinute) {
          return { ok: false, reason: 'rate_limit_exceeded' };
        }
      }
      if (cap !== null) {
        const spent = existing?.spent.get(input.period) ?? 0;
        if (spent + held + input.amount > cap) return { ok: false, reason: 'spend_cap_exceeded' };
      }
      if (input.creditCheck && balance - held < input.amount) {
        return { ok: false, reason: 'insufficient_credit' };
      }

      const t = state(input.tenantId);
      t.held += input.amount;
      t.holds.set(input.requestId, {
        amount: input.amount,
        state: 'held',
        expiresAt: input.now + Math.min(Math.floor((input.leaseSeconds ?? input.holdTtlSeconds) * 1000), input.holdTtlSeconds * 1000),
        deadline: input.now + input.holdTtlSeconds * 1000,
        owner: input.owner ?? '',
        period: input.period,
        keyId: input.keyId,
        charged: 0,
      });
      t.open.add(input.requestId);
      if (limits !== null) {
        const c = counters(t, input.minute, limits.scopeId);
        if (limits.requestsPerMinute !== null) c.requests += 1;
        if (limits.tokensPerMinute !== null) c.tokens += input.tokens;
      }
      return { ok: true, replay: false };
    },

    async extendLease(raw) {
      open();
      const input = checkLease(raw);
      at(input.now);
      const existing = tenants.get(input.tenantId);
      const lease = existing?.holds.get(input.leaseId);
      if (existing !== undefined && lease?.state === 'held' && lease.gen !== existing.leaseGen) {
        // Stale (the cap changed since it was granted): it grows no more. Requests admitted
        // inside it may still hold part of it, so its holder gives it back, not this.
        return { granted: 0, total: lease.amount, gone: true };
      }
      if (lease !== undefined && (lease.state !== 'held' || lease.deadline <= input.now)) {
        return { granted: 0, total: lease.state === 'held' ? lease.amount : 0, gone: true };
      }
      if ((existing?.leaseBlockUntil ?? 0) > input.now) return { granted: 0, total: lease?.amount ?? 0, gone: false };
      const held = existing?.held ?? 0;
      let grant = input.amount;
      if (input.creditCheck) grant = Math.min(grant, Math.floor(((existing?.balance ?? 0) - held) / input.headroom));
      const cap = existing?.cap ?? null;
      if (cap !== null) grant = Math.min(grant, Math.floor((cap - (existing?.spent.get(input.period) ?? 0) - held) / input.headroom));
      const total = lease?.amount ?? 0;
      if (grant < input.minimum) return { granted: 0, total, gone: false };

      const t = state(input.tenantId);
      const deadline = lease?.deadline ?? input.now + input.holdTtlSeconds * 1000;
      const expiresAt = Math.min(input.now + Math.floor(input.leaseSeconds * 1000), deadline);
      t.held += grant;
      t.leased += grant;
      if (lease !== undefined) {
        lease.amount += grant;
        lease.expiresAt = expiresAt;
      } else {
        t.holds.set(input.leaseId, { amount: grant, state: 'held', expiresAt, deadline, owner: input.owner, period: input.period, keyId: null, charged: 0, lease: true, gen: t.leaseGen });
        t.open.add(input.leaseId);
      }
      return { granted: grant, total: total + grant, gone: false };
    },

    async moveFromLease(raw) {
      open();
      const input = checkMove(raw);
      at(input.now);
      const t = tenants.get(input.tenantId);
      if (t?.holds.has(input.requestId) === true) return 'exists';
      const lease = t?.holds.get(input.leaseId);
      if (t === undefined || lease?.state !== 'held') return 'no_lease';
      if (lease.gen !== t.leaseGen && input.admitted !== true) return 'stale';
      if (lease.amount < input.amount) return 'no_lease';
      lease.amount -= input.amount;
      t.leased -= input.amount;
      const deadline = input.now + input.holdTtlSeconds * 1000;
      t.holds.set(input.requestId, {
        amount: input.amount,
        state: 'held',
        expiresAt: Math.min(input.now + Math.floor(input.leaseSeconds * 1000), deadline),
        deadline,
        owner: input.owner,
        period: input.period,
        keyId: input.keyId,
        charged: 0,
        ...(input.claim === true ? { claimed: true } : {}),
      });
      t.open.add(input.requestId);
      return 'moved';
    },

    async settle(raw): Promise<SettleOutcome> {
      open();
      const input = checkSettle(raw);
      at(input.now);
      const t = state(input.tenantId);
      const hold = t.holds.get(input.requestId);
      if (hold?.state === 'settled') return { applied: false, charged: hold.charged, uncovered: 0 };

      let charged: number;
      let uncovered: number;
      const wasHeld = hold?.state === 'held';
      // Admitted inside a lease and never moved out: the commitment leaves the lease now.
      const fromLease = hold === undefined && input.lease !== undefined ? takeCommitment(t, input.lease) : null;
      if (wasHeld) {
        charged = Math.min(input.charge, hold.amount);
        uncovered = input.charge - charged;
        t.held -= hold.amount;
        t.open.delete(input.requestId);
      } else if (fromLease?.taken === true) {
        charged = Math.min(input.charge, input.lease!.amount);
        uncovered = input.charge - charged;
        t.held -= input.lease!.amount;
      } else if (input.creditCheck) {
        const available = Math.max(t.balance - t.held, 0);
        charged = Math.min(input.charge, available);
        uncovered = input.charge - charged;
      } else {
        charged = input.charge;
        uncovered = 0;
      }

      t.balance -= charged;
      t.spent.set(input.period, (t.spent.get(input.period) ?? 0) + charged);
      if (hold === undefined) {
        t.holds.set(input.requestId, {
          amount: 0,
          state: 'settled',
          expiresAt: input.now,
          deadline: input.now,
          owner: '',
          period: input.period,
          keyId: input.usage.keyId,
          charged,
        });
      } else {
        hold.state = 'settled';
        hold.charged = charged;
      }
      // A hold released before (or reaped) is on the finished list already.
      if (hold === undefined || wasHeld) finishedHold(t, input.requestId);
      if (charged > 0) {
        append(t, {
          time: new Date(input.now).toISOString(),
          type: 'charge',
          amount: -charged,
          balanceAfter: t.balance,
          requestId: input.requestId,
          reason: null,
        });
      }
      recordUsage(t, { ...input.usage, cost: charged });
      const dayKey = `${input.day}\u0000${input.usage.alias}`;
      const prev = t.byDay.get(dayKey);
      t.byDay.set(dayKey, {
        day: input.day,
        alias: input.usage.alias,
        promptTokens: (prev?.promptTokens ?? 0) + input.usage.promptTokens,
        completionTokens: (prev?.completionTokens ?? 0) + input.usage.completionTokens,
        requests: (prev?.requests ?? 0) + input.usage.requestCount,
        cost: (prev?.cost ?? 0) + charged,
      });
      return fromLease === null ? { applied: true, charged, uncovered } : { applied: true, charged, uncovered, leaseStale: fromLease.stale };
    },

    async release(tenantId, requestId) {
      open();
      nonEmpty(tenantId, 'tenantId');
      nonEmpty(requestId, 'requestId');
      const t = state(tenantId);
      const hold = t.holds.get(requestId);
      if (!hold) {
        tombstone(t, requestId);
        return false;
      }
      if (hold.state !== 'held') return false;
      releaseHold(t, requestId, hold);
      return true;
    },

    async claim(tenantId, requestId, owner) {
      open();
      nonEmpty(tenantId, 'tenantId');
      nonEmpty(requestId, 'requestId');
      const hold = tenants.get(tenantId)?.holds.get(requestId);
      if (hold?.state !== 'held') return false;
      hold.claimed = true;
      if (owner) hold.owner = owner;
      return true;
    },

    async renewLeases(tenantId, requestIds, now, leaseSeconds) {
      open();
      checkRenew(tenantId, requestIds, now, leaseSeconds);
      at(now);
      const t = tenants.get(tenantId);
      let n = 0;
      for (const requestId of requestIds) {
        const hold = t?.holds.get(requestId);
        if (hold?.state !== 'held') continue;
        hold.expiresAt = Math.min(now + Math.floor(leaseSeconds * 1000), hold.deadline);
        n += 1;
      }
      return n;
    },

    async releaseUnclaimed(tenantId, requestId) {
      open();
      nonEmpty(tenantId, 'tenantId');
      nonEmpty(requestId, 'requestId');
      const t = state(tenantId);
      const hold = t.holds.get(requestId);
      if (hold === undefined) {
        tombstone(t, requestId);
        return 'tombstone';
      }
      if (hold.state !== 'held' || hold.claimed) return 'kept';
      releaseHold(t, requestId, hold);
      return 'released';
    },

    async reapExpired(tenantId, now) {
      open();
      nonEmpty(tenantId, 'tenantId');
      instant(now, 'now');
      at(now);
      const t = tenants.get(tenantId);
      if (t === undefined) return 0;
      let count = 0;
      for (const requestId of [...t.open]) {
        const hold = t.holds.get(requestId);
        if (hold !== undefined && hold.state === 'held' && hold.expiresAt <= now) {
          releaseHold(t, requestId, hold);
          count += 1;
        }
      }
      return count;
    },

    async tenantsWithHolds() {
      open();
      const ids: string[] = [];
      for (const [id, t] of tenants) if (t.open.size > 0) ids.push(id);
      return ids.sort();
    },

    async account(tenantId, period): Promise<AccountState> {
      open();
      nonEmpty(tenantId, 'tenantId');
      nonEmpty(period, 'period');
      const t = tenants.get(tenantId);
      return {
        balance: t?.balance ?? 0,
        held: (t?.held ?? 0) - (t?.leased ?? 0),
        leased: t?.leased ?? 0,
        cap: t?.cap ?? null,
        spent: t?.spent.get(period) ?? 0,
      };
    },

    async adjustBalance(tenantId, amount, idempotencyKey, reason, now) {
      open();
      checkAdjust(tenantId, amount, idempotencyKey, reason, now);
      at(now);

      const existing = tenants.get(tenantId);
      const first = existing?.adjustments.get(idempotencyKey);
      if (first !== undefined) return { ...copyEntry(first), replayed: true };
      const balance = existing?.balance ?? 0;
      // A deduct leaves at least what is held: requests admitted inside a lease hold part of it.
      if (amount < 0 && balance + amount < (existing?.held ?? 0)) {
        const leasedInTheWay = balance + amount >= (existing?.held ?? 0) - (existing?.leased ?? 0);
        if (leasedInTheWay) existing!.leaseBlockUntil = now + LEASE_BLOCK_MS;
        throw new InsufficientBalanceError(leasedInTheWay);
      }

      const t = state(tenantId);
      t.balance += amount;
      const entry = append(t, {
        time: new Date(now).toISOString(),
        type: amount > 0 ? 'grant' : 'deduct',
        amount,
        balanceAfter: t.balance,
        requestId: null,
        reason,
      });
      t.adjustments.set(idempotencyKey, entry);
      return { ...copyEntry(entry), replayed: false };
    },

    async setCap(tenantId, cap) {
      open();
      nonEmpty(tenantId, 'tenantId');
      if (cap !== null) nonNegativeInteger(cap, 'cap');
      if (cap === null && !tenants.has(tenantId)) return;
      const t = state(tenantId);
      t.cap = cap;
      t.leaseGen += 1;
    },

    async staleLeased(tenantId) {
      open();
      nonEmpty(tenantId, 'tenantId');
      const t = tenants.get(tenantId);
      let sum = 0;
      for (const id of t?.open ?? []) {
        const h = t!.holds.get(id);
        if (h?.lease === true && h.gen !== t!.leaseGen) sum += h.amount;
      }
      return sum;
    },

    async ledger(tenantId, limit, before) {
      open();
      checkListing(tenantId, limit);
      const all = tenants.get(tenantId)?.ledger ?? [];
      const older = before === undefined ? all : all.filter((e) => Number(e.id) < Number(before));
      return newestFirst(older, limit, copyEntry);
    },

    async usageRecords(tenantId, limit) {
      open();
      checkListing(tenantId, limit);
      return newestFirst(tenants.get(tenantId)?.usage ?? [], limit, copyUsage);
    },

    async usageByDay(tenantId, fromDay, toDay) {
      open();
      nonEmpty(tenantId, 'tenantId');
      day(fromDay, 'fromDay');
      day(toDay, 'toDay');
      const rows: UsageDay[] = [];
      for (const row of tenants.get(tenantId)?.byDay.values() ?? []) {
        if (row.day >= fromDay && row.day <= toDay) rows.push(copyDay(row));
      }
      return rows.sort((a, b) =>
        a.day < b.day ? -1 : a.day > b.day ? 1 : a.alias < b.alias ? -1 : a.alias > b.alias ? 1 : 0,
      );
    },

    async ping() {
      open();
    },

    async close() {
      closed = true;
    },
  };
}
