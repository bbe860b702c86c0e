import { randomUUID } from 'node:crypto';
import type { LeaseCommitment, Ledger, MoveOutcome } from '../../store/ledger-contract.js';

/**
 * Credit leases: admission without a round trip to the store.
 *
 * A per-request hold costs a round trip to Redis before the request may go on
 * (most of what the money path adds to a request's latency). Instead, this
 * instance sets a slice of a busy tenant's available credit aside as one hold
 * in the store (the lease), checked once against the balance and the spend cap
 * for the whole slice, and admits the tenant's next requests against it
 * locally: the request's worst case is committed inside the lease, with no store
 * call. Its settlement takes the commitment out of the lease in the same script
 * (Ledger.settle with `lease`), and a request that delivered nothing gives it
 * back to the lease locally. Money stays where it was: the lease was already
 * counted as held, and a commitment changes no total in the store.
 *
 * A commitment is made only while the store confirmed the lease within
 * CONFIRMED_WITHIN_MS (a grant, a settlement out of it, a move, a renewal) and
 * renewed it within two thirds of its lease: an instance cut off from the store
 * stops admitting within half a second, and what it admitted is covered by credit the
 * store still holds. Otherwise the request's hold is moved out of the lease by a
 * script sent before the admission's answer leaves (the store then confirms the
 * lease again). A lease of an older generation (the cap changed) is given back as
 * soon as a settlement or a move reports it. Giving a lease back (below) first
 * moves every commitment still in flight into a hold of its own, so a request
 * never depends on a lease that is gone.
 *
 * A lease is sized for `requests` requests like the one that opened or grew it,
 * at most the room / `headroom` (other instances and direct holds keep the rest),
 * grown in the background when it runs low, renewed with the live holds, and
 * given back when the tenant is idle for `idleSeconds`, when it reaches half its
 * ttl, at a stop, before a direct hold is refused for want of credit or cap
 * room (so one instance never refuses a request its own lease could have paid
 * for), and when another instance recalls it for the same reason (Billing's
 * LeasePeers). If the store cannot be reached, the lease stops admitting: what was set
 * aside runs out with its lease and the reaper releases it.
 */
export interface LeaseSettings {
  readonly requests: number;
  readonly headroom: number;
  readonly idleSeconds: number;
}

/** What a lease needs of the billing settings (read at every use: a reload applies). */
export interface LeaseContext {
  readonly lease: LeaseSettings;
  readonly creditCheck: boolean;
  readonly holdTtlSeconds: number;
  readonly holdLeaseSeconds: number;
}

export interface LeaseEvents {
  failed(what: string, err: unknown): void;
}

interface Commitment {
  readonly amount: number;
  readonly keyId: string | null;
  readonly period: string;
  /** The request ended and its settlement waits in the journal: the lease may go idle without it. */
  journaled: boolean;
}

interface Lease {
  readonly id: string;
  readonly tenantId: string;
  readonly openedAt: number;
  /** Micro-units this instance may still commit or move into request holds. */
  available: number;
  /** Requests admitted inside the lease and not settled, released or moved out yet. */
  readonly commitments: Map<string, Commitment>;
  /** When the store last said this lease is open (and of the current generation). */
  confirmedAt: number;
  /** When the store last extended the lease's own expiry (a grant or a renewal). */
  renewedAt: number;
  lastUsed: number;
  /** Moves and extensions under way (a retirement waits for them). */
  readonly pending: Set<Promise<void>>;
  extending: boolean;
  /** Never admits again: being given back, or gone from the store. */
  closed: boolean;
}

/** After a refused growth, the tenant is not asked for a lease again for this long. */
const COOLDOWN_MS = 1_000;

/** A lease admits by commitment only while the store confirmed it this recently. */
export const CONFIRMED_WITHIN_MS = 500;

/**
 * How a request was admitted from a lease: committed inside it (`moved` null: no store
 * call was made), or its hold moved out of it (the store's answer, which the request
 * must see as 'moved' before it reaches the provider).
 */
export interface Taken {
  readonly leaseId: string;
  readonly moved: Promise<MoveOutcome | 'failed'> | null;
}

export class CreditLeases {
  private readonly byTenant = new Map<string, Lease>();
  /** Request id → the lease it is committed in. */
  private readonly byRequest = new Map<string, Lease>();
  private readonly cooldown = new Map<string, number>();
  private readonly retiring = new Set<Promise<void>>();
  private sweeper: NodeJS.Timeout | null = null;
  private stopped = false;

  constructor(
    private readonly ledger: Ledger,
    private readonly settings: () => LeaseContext,
    private readonly owner: string,
    private readonly now: () => number,
    private readonly events: LeaseEvents,
  ) {}

  /**
   * Admits a request locally when this tenant's lease has room for its hold: committed
   * inside the lease when the store confirmed it recently, otherwise moved out of it by a
   * script sent now (see Taken). null: no lease with room (hold it directly; `grow` then
   * opens or grows the lease for the next ones).
   */
  take(tenantId: string, requestId: string, keyId: string | null, amount: number, period: string): Taken | null {
    const l = this.byTenant.get(tenantId);
    if (!l || l.closed) return null;
    const s = this.settings();
    const now = this.now();
    if (now - l.openedAt >= (s.holdTtlSeconds * 1000) / 2) {
      void this.retireLease(l); // renewals cannot take it past its ttl: a fresh one is opened next
      return null;
    }
    if (l.available < amount) return null;
    l.available -= amount;
    l.lastUsed = now;
    if (l.available < amount * Math.ceil(s.lease.requests / 2)) this.grow(tenantId, amount, period);
    if (now - l.confirmedAt <= CONFIRMED_WITHIN_MS && now - l.renewedAt <= (s.holdLeaseSeconds * 2000) / 3) {
      l.commitments.set(requestId, { amount, keyId, period, journaled: false });
      this.byRequest.set(requestId, l);
      return { leaseId: l.id, moved: null };
    }
    const moved = this.ledger
      .moveFromLease({ tenantId, leaseId: l.id, requestId, keyId, amount, period, holdTtlSeconds: s.holdTtlSeconds, leaseSeconds: s.holdLeaseSeconds, owner: this.owner, now })
      .then(
        (outcome) => {
          if (outcome === 'moved') l.confirmedAt = Math.max(l.confirmedAt, now);
          else if (outcome === 'exists') l.available += amount; // the request id was taken: nothing left the lease
          else void this.retireLease(l); // released, reaped or stale (a cap change) in the store
          return outcome;
        },
        (err: unknown) => {
          // Unknown whether it moved: admit no more against this lease (the request is refused,
          // and its release, journaled if need be, frees the hold if it was written after all).
          this.events.failed('lease', err);
          void this.retireLease(l);
          return 'failed' as const;
        },
      );
    this.track(l, moved.then(() => undefined));
    return { leaseId: l.id, moved };
  }

  /** The commitment this request holds inside a lease (null: none; it has a hold of its own, or nothing). */
  commitment(requestId: string): LeaseCommitment | null {
    const l = this.byRequest.get(requestId);
    const c = l?.commitments.get(requestId);
    return l && c ? { id: l.id, amount: c.amount } : null;
  }

  /**
   * The request's settlement was applied, and the commitment is no longer this lease's
   * (`stale` as the store reported it: true, the lease admits no more and is given back;
   * false, the store confirmed it; undefined, no word on the lease: the request had been
   * settled before, or its settlement can never be applied). A settlement waiting in the
   * journal is `journaled` instead.
   */
  settled(requestId: string, stale: boolean | undefined): void {
    const l = this.byRequest.get(requestId);
    if (!l) return;
    this.drop(l, requestId);
    if (stale === true) void this.retireLease(l);
    else if (stale === false) l.confirmedAt = Math.max(l.confirmedAt, this.now());
  }

  /**
   * A request that delivered nothing: its commitment goes back to the lease, with no store
   * call, when the lease still admits. False when the request has no commitment, or its
   * lease is being given back (the store must release it: it may have been moved).
   */
  releaseLocal(requestId: string): boolean {
    const l = this.byRequest.get(requestId);
    const c = l?.commitments.get(requestId);
    if (!l || !c) return false;
    this.drop(l, requestId);
    if (l.closed) return false;
    l.available += c.amount;
    return true;
  }

  /**
   * The request's settlement could not be written and waits in the journal (with the
   * commitment). Its lease may go idle all the same: giving it back moves the commitment
   * into a hold of its own, which the journaled settlement then settles.
   */
  journaled(requestId: string): void {
    const c = this.byRequest.get(requestId)?.commitments.get(requestId);
    if (c) c.journaled = true;
  }

  /** Forgets a commitment whose credit left the lease some other way (another process moved it). */
  forgetCommitment(requestId: string): void {
    const l = this.byRequest.get(requestId);
    if (l) this.drop(l, requestId);
  }

  private drop(l: Lease, requestId: string): void {
    l.commitments.delete(requestId);
    if (this.byRequest.get(requestId) === l) this.byRequest.delete(requestId);
  }

  /** Opens or grows this tenant's lease in the background, sized for requests holding `perRequest`. */
  grow(tenantId: string, perRequest: number, period: string): void {
    if (this.stopped) return;
    const now = this.now();
    if ((this.cooldown.get(tenantId) ?? 0) > now) return;
    let l = this.byTenant.get(tenantId);
    if (l && (l.extending || l.closed)) return;
    if (!l) {
      l = { id: `lease.${randomUUID()}`, tenantId, openedAt: now, available: 0, commitments: new Map(), confirmedAt: 0, renewedAt: 0, lastUsed: now, pending: new Set(), extending: false, closed: false };
      this.byTenant.set(tenantId, l);
      this.startSweeper();
    }
    const lease = l;
    const s = this.settings();
    const unit = Math.max(1, perRequest);
    lease.extending = true;
    this.track(
      lease,
      this.ledger
        .extendLease({
          tenantId,
          leaseId: lease.id,
          amount: unit * s.lease.requests,
          minimum: unit,
          headroom: s.lease.headroom,
          creditCheck: s.creditCheck,
          period,
          holdTtlSeconds: s.holdTtlSeconds,
          leaseSeconds: s.holdLeaseSeconds,
          owner: this.owner,
          now,
        })
        .then(
          (r) => {
            lease.extending = false;
            if (r.gone) return void this.retireLease(lease); // released, reaped or stale in the store
            if (r.granted > 0) {
              lease.available += r.granted;
              lease.confirmedAt = lease.renewedAt = Math.max(lease.renewedAt, now);
              return;
            }
            this.cooldown.set(tenantId, now + COOLDOWN_MS);
            if (r.total === 0) this.forget(lease); // never opened in the store
          },
          (err: unknown) => {
            lease.extending = false;
            this.events.failed('lease', err);
            this.cooldown.set(tenantId, now + COOLDOWN_MS);
            void this.retireLease(lease); // it may have been opened: give it back
          },
        ),
    );
  }

  /** True when this tenant has a lease holding credit this instance could give back. */
  holds(tenantId: string): boolean {
    const l = this.byTenant.get(tenantId);
    return l !== undefined && !l.closed && (l.available > 0 || l.extending);
  }

  /** Gives this tenant's lease back (after the moves under way); resolves when the store has it. */
  retire(tenantId: string): Promise<void> {
    const l = this.byTenant.get(tenantId);
    return l ? this.retireLease(l) : Promise.resolve();
  }

  /** Renews every open lease (with the live holds); a lease the store no longer has is forgotten. */
  async renew(): Promise<void> {
    const s = this.settings();
    for (const l of [...this.byTenant.values()]) {
      if (l.closed || l.extending) continue;
      try {
        const at = this.now();
        const n = await this.ledger.renewLeases(l.tenantId, [l.id], at, s.holdLeaseSeconds);
        if (n > 0) l.renewedAt = Math.max(l.renewedAt, at);
        else if (!l.extending) void this.retireLease(l);
      } catch (err) {
        this.events.failed('lease', err);
        void this.retireLease(l);
      }
    }
  }

  /** Requests committed inside this instance's leases right now (settled, released or moved out ones are not kept). */
  get committed(): number {
    return this.byRequest.size;
  }

  /** Micro-units set aside by this instance's leases and not yet moved into request holds. */
  get leased(): number {
    let sum = 0;
    for (const l of this.byTenant.values()) if (!l.closed) sum += l.available;
    return sum;
  }

  /** A stop: no lease is opened again; every lease is given back. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.sweeper) clearInterval(this.sweeper);
    this.sweeper = null;
    for (const l of [...this.byTenant.values()]) void this.retireLease(l);
    while (this.retiring.size) await Promise.all([...this.retiring]);
  }

  private track(l: Lease, p: Promise<void>): void {
    const done = p.finally(() => l.pending.delete(done));
    l.pending.add(done);
  }

  private forget(l: Lease): void {
    l.closed = true;
    if (this.byTenant.get(l.tenantId) === l) this.byTenant.delete(l.tenantId);
  }

  private retireLease(l: Lease): Promise<void> {
    const wasClosed = l.closed;
    this.forget(l);
    if (wasClosed) return Promise.all([...this.retiring]).then(() => undefined);
    const done = (async () => {
      // Moves were sent before this release on the same connection, so they land first;
      // waiting for them keeps a move from ever meeting a lease given back under it.
      while (l.pending.size) await Promise.all([...l.pending]);
      await this.moveCommitments(l);
      try {
        await this.ledger.release(l.tenantId, l.id);
      } catch (err) {
        this.events.failed('lease', err); // it runs out with its lease and the reaper releases it
      }
    })();
    this.retiring.add(done);
    void done.finally(() => this.retiring.delete(done));
    return done;
  }

  /**
   * Every request still committed inside a lease being given back gets a hold of its own
   * (a settlement or release sent meanwhile is ordered with its move in the store: whichever
   * lands second finds the request's hold or tombstone). A commitment whose move could not
   * be written stays known: its settlement still names the lease.
   */
  private async moveCommitments(l: Lease): Promise<void> {
    const s = this.settings();
    const now = this.now();
    await Promise.all(
      [...l.commitments].map(async ([requestId, c]) => {
        try {
          await this.ledger.moveFromLease({
            tenantId: l.tenantId, leaseId: l.id, requestId, keyId: c.keyId, amount: c.amount, period: c.period,
            holdTtlSeconds: s.holdTtlSeconds, leaseSeconds: s.holdLeaseSeconds, owner: this.owner, now, admitted: true,
          });
          this.drop(l, requestId);
        } catch (err) {
          this.events.failed('lease', err);
        }
      }),
    );
  }

  private startSweeper(): void {
    if (this.sweeper) return;
    const every = Math.max(100, (this.settings().lease.idleSeconds * 1000) / 2);
    this.sweeper = setInterval(() => this.sweep(), every);
    this.sweeper.unref();
  }

  /** Gives back the leases of tenants idle for idleSeconds. */
  private sweep(): void {
    const idleMs = this.settings().lease.idleSeconds * 1000;
    const now = this.now();
    for (const l of [...this.byTenant.values()]) {
      if (l.pending.size === 0 && now - l.lastUsed >= idleMs && [...l.commitments.values()].every((c) => c.journaled)) void this.retireLease(l);
    }
    for (const [t, until] of this.cooldown) if (until <= now) this.cooldown.delete(t);
    if (this.byTenant.size === 0 && this.sweeper) {
      clearInterval(this.sweeper);
      this.sweeper = null;
    }
  }
}
