/**
 * The money contract: prepaid balances, holds, settlement, spend caps,
 * throttling counters, the ledger and the usage counter. All amounts are
 * integer micro-units of the deployment's currency.
 *
 * Every operation is atomic (one Redis script over one tenant's keys, which
 * share a hash tag) and idempotent:
 * - reserve: by request id: a second reserve with the same id changes nothing
 *   and answers `replay` (ioredis may resend a command after a reconnect);
 * - settle / release: by request id: applied once; later calls change nothing;
 * - adjustBalance: by the caller's idempotency key.
 * Implementations: Redis (deployments) and memory (embedded default); one
 * contract test suite runs against both.
 */

export interface RateLimits {
  /** null: no limit. */
  readonly requestsPerMinute: number | null;
  readonly tokensPerMinute: number | null;
  /** Counter scope id: the key id or the tenant id, as configured. */
  readonly scopeId: string;
}

export interface ReserveInput {
  readonly tenantId: string;
  readonly requestId: string;
  readonly keyId: string | null;
  /** Worst-case cost to hold (micro-units, >= 0). */
  readonly amount: number;
  /** Worst-case tokens (for tokens-per-minute throttling). */
  readonly tokens: number;
  /** Refuse when the available balance (balance - held) is below `amount`. */
  readonly creditCheck: boolean;
  /** Spend-cap period the request falls in, e.g. "2026-11". */
  readonly period: string;
  /** Epoch minute, for throttling windows. */
  readonly minute: number;
  readonly limits: RateLimits | null;
  /** The longest the hold can live, renewals included. */
  readonly holdTtlSeconds: number;
  /**
   * The hold's lease: it expires this long after `now` unless renewed (renewLeases),
   * never later than holdTtlSeconds after it was placed. Absent: holdTtlSeconds.
   */
  readonly leaseSeconds?: number;
  /** The instance that placed the hold (recorded with it, for operators). */
  readonly owner?: string;
  readonly now: number; // epoch ms
}

export type ReserveOutcome =
  | { readonly ok: true; readonly replay: boolean }
  | { readonly ok: false; readonly reason: 'insufficient_credit' | 'spend_cap_exceeded' | 'rate_limit_exceeded' };

/**
 * A credit lease: one instance sets a slice of a tenant's credit aside as one
 * hold (its id is the lease id, never a request id), and later moves pieces of
 * it into request holds without asking whether the balance covers them: the
 * check was made once for the whole slice. The lease is renewed, reaped and
 * released like any hold.
 */
export interface LeaseInput {
  readonly tenantId: string;
  readonly leaseId: string;
  /** Micro-units wanted (> 0). Fewer are granted when the room is smaller. */
  readonly amount: number;
  /** The least worth granting (>= 1); less room than this refuses. */
  readonly minimum: number;
  /**
   * Only a share of the room is granted: at most (available balance, and the
   * spend cap's room) / headroom, so other instances and direct holds keep the rest.
   */
  readonly headroom: number;
  /** With the credit check off only the spend cap limits the grant. */
  readonly creditCheck: boolean;
  readonly period: string;
  readonly holdTtlSeconds: number;
  readonly leaseSeconds: number;
  readonly owner: string;
  readonly now: number;
}

export interface LeaseOutcome {
  /** Micro-units added now (0: refused, nothing changed). */
  readonly granted: number;
  /** The lease's amount after this call (what it can still move into request holds). */
  readonly total: number;
  /**
   * The lease was released or reaped (it can never be extended or moved from again), or is
   * stale after a cap change (it grows no more and admits nothing; requests admitted in it
   * still move out): its holder gives it back.
   */
  readonly gone: boolean;
}

export interface MoveInput {
  readonly tenantId: string;
  readonly leaseId: string;
  readonly requestId: string;
  readonly keyId: string | null;
  /** Micro-units of the request's hold (>= 0). */
  readonly amount: number;
  readonly period: string;
  readonly holdTtlSeconds: number;
  readonly leaseSeconds: number;
  readonly owner: string;
  readonly now: number;
  /**
   * The request was admitted before (inside the lease, by the instance that holds it) and
   * its credit only changes place: a lease of an older generation still gives it. Absent:
   * an admission, which a stale lease refuses ('stale').
   */
  readonly admitted?: boolean;
  /** The response processing takes the moved hold over at once (see Ledger.claim). */
  readonly claim?: boolean;
}

/**
 * moved: the request now has its own open hold and the lease is that much smaller
 * (the tenant's held total does not change); exists: the request id has a hold or
 * a tombstone already (nothing changed); no_lease: the lease is not open or is too
 * small (nothing changed); stale: an admission met a lease of an older generation
 * (a cap change since it was granted): nothing changed, and its holder should give it
 * back once the requests admitted inside it have holds of their own.
 */
export type MoveOutcome = 'moved' | 'exists' | 'no_lease' | 'stale';

/**
 * A request admitted inside a credit lease without a hold of its own: the instance that
 * holds the lease set `amount` aside in it locally (no store call). Its settlement takes
 * that amount out of the lease when the request has no hold (see SettleInput.lease).
 */
export interface LeaseCommitment {
  readonly id: string;
  readonly amount: number;
}

/** One usage-counter record. There is no field for prompt or completion content. */
export interface UsageRecord {
  readonly time: string; // ISO-8601 UTC
  readonly tenantId: string;
  readonly keyId: string | null;
  readonly alias: string;
  readonly internalModel: string;
  readonly promptTokens: number;
  readonly completionTokens: number;
  readonly totalTokens: number;
  readonly requestCount: number;
  readonly requestId: string;
  /** Charged micro-units (after any cap at the hold). */
  readonly cost: number;
  readonly estimated: boolean;
}

export interface SettleInput {
  readonly tenantId: string;
  readonly requestId: string;
  /** Actual cost (micro-units). Never more than the hold is taken; the rest is recorded as uncovered. */
  readonly charge: number;
  readonly creditCheck: boolean;
  readonly period: string;
  /** UTC day of the request, "YYYY-MM-DD" (usage by day). */
  readonly day: string;
  readonly usage: Omit<UsageRecord, 'cost'>;
  readonly now: number;
  /**
   * The request was admitted inside this credit lease. When it has neither a hold nor a
   * tombstone (it was never moved out), its commitment is taken out of the open lease and
   * settled like a hold of that amount; a lease that is gone or too small leaves it
   * settled like a hold that was reaped.
   */
  readonly lease?: LeaseCommitment;
}

export interface SettleOutcome {
  /** false: this request was already settled; nothing changed. */
  readonly applied: boolean;
  /** Micro-units taken from the balance. */
  readonly charged: number;
  /** Micro-units of the actual cost the hold (or balance) did not cover. */
  readonly uncovered: number;
  /**
   * With SettleInput.lease, when the settlement took nothing out of the lease or the lease
   * is of an older generation: its holder admits no more inside it.
   */
  readonly leaseStale?: boolean;
}

/**
 * What releaseUnclaimed did: released the open, unclaimed hold; wrote a tombstone (the
 * request had no hold at all, so nothing can move it out of a lease any more); or kept
 * what was there (claimed, finished, or a tombstone already).
 */
export type UnclaimedOutcome = 'released' | 'tombstone' | 'kept';

export interface AccountState {
  readonly balance: number;
  /** Held by requests' own holds (what they may still cost). */
  readonly held: number;
  /**
   * Set aside in credit leases and not yet moved into a request's hold. Not spent and
   * not held by any request; the balance check and the spend cap count it with `held`.
   */
  readonly leased: number;
  /** null: no spend cap. */
  readonly cap: number | null;
  readonly spent: number; // in the given period
}

export interface LedgerEntry {
  readonly id: string;
  readonly time: string;
  readonly type: 'grant' | 'deduct' | 'charge';
  /** Signed change of the balance. */
  readonly amount: number;
  readonly balanceAfter: number;
  readonly requestId: string | null;
  readonly reason: string | null;
}

/** The entry of an adjustment; `replayed` when its idempotency key had been applied before (this call changed nothing). */
export type AdjustResult = LedgerEntry & { readonly replayed: boolean };

export interface UsageDay {
  readonly day: string;
  readonly alias: string;
  readonly promptTokens: number;
  readonly completionTokens: number;
  readonly requests: number;
  readonly cost: number;
}

/** How long a deduct that leased credit stood in the way keeps new leases from being granted. */
export const LEASE_BLOCK_MS = 2_000;

export class InsufficientBalanceError extends Error {
  /**
   * @param leased true when the deduction would fit if the tenant's credit leases were
   *   given back (no lease is granted for LEASE_BLOCK_MS: recall them and ask again).
   */
  constructor(readonly leased = false) {
    super('the balance, less what open requests hold, does not cover this deduction');
    this.name = 'InsufficientBalanceError';
  }
}

export interface Ledger {
  /**
   * True when the ledger's state lives in this process (the in-memory store): it dies with
   * the process, so there is nothing to make durable before an answer leaves, and a
   * settlement may run after it. Absent: a shared store (Redis), written first.
   */
  readonly inProcess?: boolean;
  /**
   * Runs `run` (synchronously) and sends the store commands it issues
   * together when it returns: one write to the store instead of one per
   * command. Each command behaves exactly as outside (its own reply, error and
   * timeout). Absent: nothing to gain (the in-memory store).
   */
  together?(run: () => void): void;
  reserve(input: ReserveInput): Promise<ReserveOutcome>;
  /** Opens a credit lease or adds to an open one (see LeaseInput). Idempotent only in effect: a lease never holds more than its grants. */
  extendLease(input: LeaseInput): Promise<LeaseOutcome>;
  /** Moves a request's hold out of an open lease (see MoveOutcome). Idempotent by request id. */
  moveFromLease(input: MoveInput): Promise<MoveOutcome>;
  settle(input: SettleInput): Promise<SettleOutcome>;
  /**
   * Gives a hold back in full (the request failed or was refused). Idempotent;
   * false if there was no open hold. With no hold at all it leaves a tombstone,
   * so a reserve for this request id that arrives later holds nothing.
   */
  release(tenantId: string, requestId: string): Promise<boolean>;
  /**
   * The request reached its response processing, which will settle or release
   * it. Idempotent; no-op without an open hold. True when the request has an
   * open hold (claimed now or before).
   */
  claim(tenantId: string, requestId: string, owner?: string): Promise<boolean>;
  /**
   * The live exchanges of one instance keep their holds: each open hold named is
   * given a lease until now + leaseSeconds (never past its holdTtlSeconds). Holds
   * not open (settled, released, reaped, unknown) are left alone. Returns how many
   * were renewed. A hold whose lease runs out is released by reapExpired.
   */
  renewLeases(tenantId: string, requestIds: readonly string[], now: number, leaseSeconds: number): Promise<number>;
  /**
   * Releases the hold unless it was claimed: the request was admitted but never
   * reached its response processing (the client left in between). With no hold at
   * all it leaves a tombstone (see UnclaimedOutcome).
   */
  releaseUnclaimed(tenantId: string, requestId: string): Promise<UnclaimedOutcome>;
  /** Releases holds whose lease ran out (their owner died). Returns how many. */
  reapExpired(tenantId: string, now: number): Promise<number>;
  /** Tenants that hold anything right now (for the reaper). */
  tenantsWithHolds(): Promise<string[]>;

  account(tenantId: string, period: string): Promise<AccountState>;
  /**
   * Grant (amount > 0) or deduct (amount < 0). A deduct never takes the balance below what
   * is held, credit leases included (requests admitted inside a lease hold part of it):
   * a request admitted against held credit is always paid for. InsufficientBalanceError
   * (the balance does not change) says when only leased credit stands in the way
   * (`leased`): no lease is granted for LEASE_BLOCK_MS then, and the caller may recall the
   * leases and ask again.
   * Idempotent by key.
   */
  adjustBalance(tenantId: string, amount: number, idempotencyKey: string, reason: string, now: number): Promise<AdjustResult>;
  /**
   * null clears the cap. Open credit leases go stale (they admit and grow no more), but
   * only their holders can give them back (requests may be committed inside them).
   */
  setCap(tenantId: string, cap: number | null): Promise<void>;
  /** Micro-units still set aside in stale credit leases (granted before the last cap change). */
  staleLeased(tenantId: string): Promise<number>;
  /**
   * Newest first. `before`: only entries older than the one with this id
   * (exclusive), for cursor pagination; ids only grow, so a page never shifts
   * when new entries arrive.
   */
  ledger(tenantId: string, limit: number, before?: string): Promise<LedgerEntry[]>;
  /** Newest first. */
  usageRecords(tenantId: string, limit: number): Promise<UsageRecord[]>;
  usageByDay(tenantId: string, fromDay: string, toDay: string): Promise<UsageDay[]>;
  /** Resolves when the ledger can be used now (readiness); StoreUnavailableError otherwise. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
