import { randomUUID } from 'node:crypto';
import type { Ledger, MoveOutcome } from '../../store/ledger-contract.js';

/**
 * Credit leases: admission without a round trip to the store.
 *
 * A per-request hold costs a round trip to Redis before the request may go on
 * (most of what the money path adds to a request's latency). Instead, this
 * instance sets a slice of a busy tenant's available credit aside as one hold
 * in the store (the lease), checked once against the balance and the spend cap
 * for the whole slice, and admits the tenant's next requests against it
 * locally. Each admission still gets its own hold in the store: the piece is
 * moved out of the lease by a script sent before the admission's answer leaves,
 * so claims, settlements, releases, renewals and the reaper see ordinary holds.
 * Money stays where it was: the lease was already counted as held, and a move
 * changes no total.
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

interface Lease {
  readonly id: string;
  readonly tenantId: string;
  readonly openedAt: number;
  /** Micro-units this instance may still move into request holds. */
  available: number;
  lastUsed: number;
  /** Moves and extensions under way (a retirement waits for them). */
  readonly pending: Set<Promise<void>>;
  extending: boolean;
  /** Never admits again: being given back, or gone from the store. */
  closed: boolean;
}

/** After a refused growth, the tenant is not asked for a lease again for this long. */
const COOLDOWN_MS = 1_000;

export class CreditLeases {
  private readonly byTenant = new Map<string, Lease>();
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
   * Admits a request locally when this tenant's lease has room for its hold: the
   * hold's move out of the lease is sent now, and the answer is what the store made
   * of it ('moved': the request has its own open hold; 'failed': the store could not
   * say). The request must not reach the provider before that answer is 'moved' (the
   * response processing waits for it, while Envoy carries the request from ext_authz
   * to ext_proc). null: no lease with room (hold it directly; `grow` then opens or
   * grows the lease for the next ones).
   */
  take(tenantId: string, requestId: string, keyId: string | null, amount: number, period: string): Promise<MoveOutcome | 'failed'> | null {
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
    const moved = this.ledger
      .moveFromLease({ tenantId, leaseId: l.id, requestId, keyId, amount, period, holdTtlSeconds: s.holdTtlSeconds, leaseSeconds: s.holdLeaseSeconds, owner: this.owner, now })
      .then(
        (outcome) => {
          if (outcome === 'exists') l.available += amount; // the request id was taken: nothing left the lease
          else if (outcome === 'no_lease') this.forget(l); // released, reaped or stale (a cap change, a deduct) in the store
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
    if (l.available < amount * Math.ceil(s.lease.requests / 2)) this.grow(tenantId, amount, period);
    return moved;
  }

  /** Opens or grows this tenant's lease in the background, sized for requests holding `perRequest`. */
  grow(tenantId: string, perRequest: number, period: string): void {
    if (this.stopped) return;
    const now = this.now();
    if ((this.cooldown.get(tenantId) ?? 0) > now) return;
    let l = this.byTenant.get(tenantId);
    if (l && (l.extending || l.closed)) return;
    if (!l) {
      l = { id: `lease.${randomUUID()}`, tenantId, openedAt: now, available: 0, lastUsed: now, pending: new Set(), extending: false, closed: false };
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
            if (r.gone) return this.forget(lease);
            if (r.granted > 0) {
              lease.available += r.granted;
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
        const n = await this.ledger.renewLeases(l.tenantId, [l.id], this.now(), s.holdLeaseSeconds);
        if (n === 0 && !l.extending) this.forget(l);
      } catch (err) {
        this.events.failed('lease', err);
        void this.retireLease(l);
      }
    }
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
      if (l.pending.size === 0 && now - l.lastUsed >= idleMs) void this.retireLease(l);
    }
    for (const [t, until] of this.cooldown) if (until <= now) this.cooldown.delete(t);
    if (this.byTenant.size === 0 && this.sweeper) {
      clearInterval(this.sweeper);
      this.sweeper = null;
    }
  }
}
