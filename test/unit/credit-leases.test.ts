/**
 * CreditLeases alone, over a stand-in ledger whose answers the test gives one
 * by one and a clock it moves: when a request is admitted locally and when not
 * (to the micro-unit), what each answer of the store does to the lease, when it
 * grows, the cooldown, renewals, the idle sweep, retirement order and the stop.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { CONFIRMED_WITHIN_MS, CreditLeases, type LeaseContext } from '../../sidecar/src/domain/billing/credit-leases.js';
import type { LeaseInput, LeaseOutcome, Ledger, MoveInput, MoveOutcome } from '../../sidecar/src/store/ledger-contract.js';

interface Pending<T> {
  resolve(v: T): void;
  reject(e: unknown): void;
}

/** A ledger whose extendLease, moveFromLease, renewLeases and release wait for the test to answer them. */
function standIn() {
  const calls: string[] = [];
  const extends_: Array<{ input: LeaseInput } & Pending<LeaseOutcome>> = [];
  const moves: Array<{ input: MoveInput } & Pending<MoveOutcome>> = [];
  const renews: Array<{ ids: readonly string[] } & Pending<number>> = [];
  const releases: string[] = [];
  let releaseFails = false;
  const ledger = {
    extendLease: (input: LeaseInput) =>
      new Promise<LeaseOutcome>((resolve, reject) => {
        calls.push('extend');
        extends_.push({ input, resolve, reject });
      }),
    moveFromLease: (input: MoveInput) =>
      new Promise<MoveOutcome>((resolve, reject) => {
        calls.push(`move ${input.requestId}`);
        moves.push({ input, resolve, reject });
      }),
    renewLeases: (_t: string, ids: readonly string[]) =>
      new Promise<number>((resolve, reject) => {
        calls.push('renew');
        renews.push({ ids, resolve, reject });
      }),
    release: async (_t: string, id: string) => {
      calls.push(`release ${id}`);
      releases.push(id);
      if (releaseFails) throw new Error('down');
      return true;
    },
  } as unknown as Ledger;
  return {
    ledger,
    calls,
    extends_,
    moves,
    renews,
    releases,
    failReleases: () => {
      releaseFails = true;
    },
  };
}

const settle = () => new Promise((r) => setImmediate(r));
/** Lets the store's last word on every lease grow old: the next admission moves instead of committing. */
const unconfirmed = () => {
  now += CONFIRMED_WITHIN_MS + 1;
};

let now = 1_000_000;
let ctx: LeaseContext;
const failures: string[] = [];
const make = (store: ReturnType<typeof standIn>) => new CreditLeases(store.ledger, () => ctx, 'inst-1', () => now, { failed: (what) => failures.push(what) });

/** A lease of `total` for ten_1, opened through grow and granted in full. */
async function opened(store: ReturnType<typeof standIn>, leases: CreditLeases, perRequest: number, total: number) {
  leases.grow('ten_1', perRequest, '2026-11');
  const e = store.extends_.at(-1)!;
  e.resolve({ granted: total, total, gone: false });
  await settle();
  return e.input.leaseId;
}

beforeEach(() => {
  now = 1_000_000;
  ctx = { lease: { requests: 8, headroom: 4, idleSeconds: 2 }, creditCheck: true, holdTtlSeconds: 3600, holdLeaseSeconds: 15 };
  failures.length = 0;
});
afterEach(() => {
  vi.useRealTimers();
});

describe('CreditLeases.take', () => {
  it('admits while the lease has room, to the last micro-unit; not one more: committed inside it, no store call', async () => {
    const store = standIn();
    const leases = make(store);
    expect(leases.take('ten_1', 'r0', null, 10, '2026-11')).toBeNull(); // no lease yet
    const id = await opened(store, leases, 10, 100);
    expect(leases.leased).toBe(100);
    for (let i = 0; i < 10; i++) expect(leases.take('ten_1', `r${i + 1}`, 'key_1', 10, '2026-11')).toStrictEqual({ leaseId: id, moved: null });
    expect(leases.leased).toBe(0);
    expect(leases.take('ten_1', 'r11', 'key_1', 1, '2026-11')).toBeNull();
    expect(store.moves).toHaveLength(0);
    expect(leases.commitment('r1')).toStrictEqual({ id, amount: 10 });
    expect(leases.commitment('r11')).toBeNull();
    expect(leases.committed).toBe(10);
    for (let i = 1; i <= 5; i++) leases.settled(`r${i}`, false);
    for (let i = 6; i <= 9; i++) expect(leases.releaseLocal(`r${i}`)).toBe(true);
    leases.forgetCommitment('r10');
    expect(leases.committed).toBe(0); // nothing kept per request once it ended
    expect(leases.commitment('r1')).toBeNull();
    expect(leases.take('ten_2', 'x', null, 0, '2026-11')).toBeNull(); // another tenant has no lease
  });

  it('commits only while the store confirmed the lease within CONFIRMED_WITHIN_MS and renewed it within two thirds of its lease; otherwise moves', async () => {
    const store = standIn();
    const leases = make(store);
    const start = now;
    const id = await opened(store, leases, 10, 1_000);
    now += CONFIRMED_WITHIN_MS;
    expect(leases.take('ten_1', 'a', 'key_1', 10, '2026-11')!.moved).toBeNull();
    now += 1;
    const b = leases.take('ten_1', 'b', 'key_1', 10, '2026-11')!;
    expect(b.moved).not.toBeNull();
    expect(store.moves.map((m) => m.input)).toContainEqual(expect.objectContaining({ leaseId: id, requestId: 'b', amount: 10, keyId: 'key_1', owner: 'inst-1', holdTtlSeconds: 3600, leaseSeconds: 15 }));
    expect(store.moves[0]!.input.admitted).toBeUndefined(); // an admission: a stale lease refuses it
    store.moves[0]!.resolve('moved');
    expect(await b.moved).toBe('moved');
    // The move confirmed the lease: the next commits again. So does a settlement that found it fresh.
    expect(leases.take('ten_1', 'c', null, 10, '2026-11')!.moved).toBeNull();
    unconfirmed();
    leases.settled('c', undefined); // no word on the lease (not applied, or journaled): confirms nothing
    expect(leases.take('ten_1', 'x', null, 10, '2026-11')!.moved).not.toBeNull();
    leases.settled('a', false);
    expect(leases.take('ten_1', 'd', null, 10, '2026-11')!.moved).toBeNull();
    // Confirmed, but not renewed for 10 s (two thirds of a 15 s lease): moves.
    now = start + 10_000;
    leases.take('ten_1', 'c2', null, 10, '2026-11'); // (moved: not confirmed since the last take)
    leases.settled('d', false);
    expect(leases.take('ten_1', 'e', null, 10, '2026-11')!.moved).toBeNull();
    now += 1;
    leases.settled('e', false);
    expect(leases.take('ten_1', 'f', null, 10, '2026-11')!.moved).not.toBeNull();
    // A renewal answered brings commitments back.
    const renewing = leases.renew();
    store.renews[0]!.resolve(1);
    await renewing;
    expect(leases.take('ten_1', 'g', null, 10, '2026-11')!.moved).toBeNull();
  });

  it('a settlement reporting the lease stale gives it back after moving what is still committed inside it into holds of their own', async () => {
    const store = standIn();
    const leases = make(store);
    const id = await opened(store, leases, 10, 1_000);
    leases.take('ten_1', 'a', 'key_1', 10, '2026-11');
    leases.take('ten_1', 'b', 'key_2', 20, '2026-11');
    leases.settled('a', true);
    expect(leases.commitment('a')).toBeNull();
    expect(leases.take('ten_1', 'c', null, 10, '2026-11')).toBeNull(); // admits no more
    await settle();
    expect(store.moves.map((m) => m.input)).toEqual([expect.objectContaining({ leaseId: id, requestId: 'b', amount: 20, keyId: 'key_2', admitted: true })]);
    expect(leases.commitment('b')).toStrictEqual({ id, amount: 20 }); // until the move is answered
    expect(store.releases).toEqual([]);
    store.moves[0]!.resolve('moved');
    await settle();
    await settle();
    expect(leases.commitment('b')).toBeNull(); // a hold of its own now
    expect(store.calls.slice(-2)).toEqual(['move b', `release ${id}`]);
  });

  it('releaseLocal gives a commitment back to its lease with no store call; not once the lease is being given back', async () => {
    const store = standIn();
    const leases = make(store);
    await opened(store, leases, 10, 1_000);
    leases.take('ten_1', 'a', null, 30, '2026-11');
    leases.take('ten_1', 'b', null, 30, '2026-11');
    expect(leases.leased).toBe(940);
    expect(leases.releaseLocal('a')).toBe(true);
    expect(leases.leased).toBe(970);
    expect(leases.releaseLocal('a')).toBe(false); // once
    expect(leases.releaseLocal('never')).toBe(false);
    const retired = leases.retire('ten_1');
    expect(store.moves.map((m) => m.input.requestId)).toEqual(['b']); // the retirement moves it out
    expect(leases.releaseLocal('b')).toBe(false); // so the store releases it (ordered after that move)
    expect(leases.commitment('b')).toBeNull();
    expect(leases.leased).toBe(0); // a lease being given back admits nothing
    store.moves[0]!.resolve('moved');
    await retired;
    expect(store.calls).toEqual(['extend', 'move b', `release ${store.extends_[0]!.input.leaseId}`]);
  });

  it('a commitment whose move fails at retirement stays known (its settlement still names the lease); forgetCommitment drops it', async () => {
    const store = standIn();
    const leases = make(store);
    const id = await opened(store, leases, 10, 100);
    leases.take('ten_1', 'a', null, 10, '2026-11');
    const retired = leases.retire('ten_1');
    await settle();
    store.moves[0]!.reject(new Error('down'));
    await retired;
    expect(failures).toEqual(['lease']);
    expect(leases.commitment('a')).toStrictEqual({ id, amount: 10 });
    leases.forgetCommitment('a');
    expect(leases.commitment('a')).toBeNull();
  });

  it("each answer of the store: moved keeps the piece out, exists puts it back, no_lease forgets the lease, a failure gives it back", async () => {
    const store = standIn();
    const leases = make(store);
    const id = await opened(store, leases, 10, 100);
    unconfirmed();
    const moved = leases.take('ten_1', 'a', null, 10, '2026-11')!.moved!;
    const exists = leases.take('ten_1', 'b', null, 10, '2026-11')!.moved!;
    store.moves[0]!.resolve('moved');
    store.moves[1]!.resolve('exists');
    expect(await moved).toBe('moved');
    expect(await exists).toBe('exists');
    expect(leases.leased).toBe(90);

    unconfirmed();
    const gone = leases.take('ten_1', 'c', null, 10, '2026-11')!.moved!;
    store.moves[2]!.resolve('no_lease');
    expect(await gone).toBe('no_lease');
    expect(leases.leased).toBe(0);
    expect(leases.holds('ten_1')).toBe(false);
    expect(leases.take('ten_1', 'd', null, 1, '2026-11')).toBeNull();
    await settle();
    expect(store.releases).toEqual([id]); // given back (a no-op in the store when it is gone there)

    const id2 = await opened(store, leases, 10, 50);
    expect(id2).not.toBe(id);
    unconfirmed();
    const stale = leases.take('ten_1', 'e', null, 10, '2026-11')!.moved!;
    store.moves[3]!.resolve('stale');
    expect(await stale).toBe('stale');
    await settle();
    expect(store.releases).toEqual([id, id2]); // a cap change: given back

    const id3 = await opened(store, leases, 10, 50);
    unconfirmed();
    const failed = leases.take('ten_1', 'f', null, 10, '2026-11')!.moved!;
    store.moves[4]!.reject(new Error('down'));
    expect(await failed).toBe('failed');
    await settle();
    expect(failures).toEqual(['lease']);
    expect(store.releases).toEqual([id, id2, id3]);
    expect(leases.take('ten_1', 'f', null, 1, '2026-11')).toBeNull();
  });

  it('grows in the background once fewer than half its requests are left, and only then', async () => {
    const store = standIn();
    const leases = make(store);
    await opened(store, leases, 10, 60); // room for 6; requests 8: grows below 4 × 10 left
    leases.take('ten_1', 'a', null, 10, '2026-11'); // 50 left
    leases.take('ten_1', 'b', null, 10, '2026-11'); // 40 left: not below 40
    expect(store.extends_).toHaveLength(1);
    leases.take('ten_1', 'c', null, 10, '2026-11'); // 30 left
    expect(store.extends_).toHaveLength(2);
    expect(store.extends_[1]!.input).toMatchObject({ amount: 80, minimum: 10, headroom: 4, creditCheck: true, tenantId: 'ten_1' });
    leases.take('ten_1', 'd', null, 10, '2026-11'); // one growth at a time
    expect(store.extends_).toHaveLength(2);
    store.extends_[1]!.resolve({ granted: 80, total: 100, gone: false });
    await settle();
    expect(leases.leased).toBe(100);
  });

  it('at half its ttl a lease admits no more and is given back', async () => {
    const store = standIn();
    const leases = make(store);
    const id = await opened(store, leases, 10, 100);
    now += 1_799_999;
    expect(leases.take('ten_1', 'a', null, 10, '2026-11')!.moved).not.toBeNull(); // not confirmed for half an hour: moved
    store.moves[0]!.resolve('moved');
    now += 1;
    expect(leases.take('ten_1', 'b', null, 10, '2026-11')).toBeNull();
    await settle();
    expect(store.releases).toEqual([id]);
  });
});

describe('CreditLeases.grow', () => {
  it('a refusal: a lease never opened is forgotten; no new ask for a second; then it asks again', async () => {
    const store = standIn();
    const leases = make(store);
    leases.grow('ten_1', 10, '2026-11');
    expect(leases.holds('ten_1')).toBe(true); // extending
    store.extends_[0]!.resolve({ granted: 0, total: 0, gone: false });
    await settle();
    expect(leases.holds('ten_1')).toBe(false);
    now += 999;
    leases.grow('ten_1', 10, '2026-11');
    expect(store.extends_).toHaveLength(1);
    now += 1;
    leases.grow('ten_1', 10, '2026-11');
    expect(store.extends_).toHaveLength(2);
    expect(store.extends_[1]!.input.leaseId).not.toBe(store.extends_[0]!.input.leaseId);
  });

  it('a refusal to grow an open lease keeps what it has; gone forgets it; a failure gives it back and cools down', async () => {
    const store = standIn();
    const leases = make(store);
    const id = await opened(store, leases, 10, 30);
    leases.take('ten_1', 'a', null, 10, '2026-11'); // 20 left: grows
    store.extends_[1]!.resolve({ granted: 0, total: 20, gone: false });
    await settle();
    expect(leases.leased).toBe(20);
    expect(leases.holds('ten_1')).toBe(true);
    now += 1_000;
    leases.grow('ten_1', 10, '2026-11');
    store.extends_[2]!.resolve({ granted: 0, total: 0, gone: true });
    await settle();
    expect(leases.leased).toBe(0);
    // Gone or stale in the store: given back, after what is committed in it has moved out.
    expect(store.moves.map((m) => m.input)).toEqual([expect.objectContaining({ requestId: 'a', admitted: true })]);
    expect(store.releases).toEqual([]);
    store.moves[0]!.resolve('no_lease');
    await settle();
    expect(store.releases).toEqual([id]);

    now += 1_000;
    leases.grow('ten_1', 0, '2026-11'); // a free request: asks for at least one micro-unit each
    expect(store.extends_[3]!.input).toMatchObject({ amount: 8, minimum: 1 });
    store.extends_[3]!.reject(new Error('down'));
    await settle();
    expect(failures).toEqual(['lease']);
    expect(store.releases).toEqual([id, store.extends_[3]!.input.leaseId]);
    now += 999;
    leases.grow('ten_1', 10, '2026-11');
    expect(store.extends_).toHaveLength(4);
  });
});

describe('CreditLeases, the rest of a lease life', () => {
  it('holds: only with credit to give back or a growth under way', async () => {
    const store = standIn();
    const leases = make(store);
    expect(leases.holds('ten_1')).toBe(false);
    await opened(store, leases, 10, 10);
    expect(leases.holds('ten_1')).toBe(true);
    leases.take('ten_1', 'a', null, 10, '2026-11'); // 0 left, grows
    expect(leases.holds('ten_1')).toBe(true);
    store.extends_[1]!.resolve({ granted: 0, total: 0, gone: false });
    await settle();
    expect(leases.holds('ten_1')).toBe(false);
  });

  it('renew: one call per lease; a lease the store no longer has, or a failure, gives it back', async () => {
    const store = standIn();
    const leases = make(store);
    const id = await opened(store, leases, 10, 100);
    let done = leases.renew();
    expect(store.renews[0]!.ids).toEqual([id]);
    store.renews[0]!.resolve(1);
    await done;
    expect(leases.leased).toBe(100);
    done = leases.renew();
    store.renews[1]!.resolve(0);
    await done;
    expect(leases.leased).toBe(0);
    await settle();
    expect(store.releases).toEqual([id]);

    const id2 = await opened(store, leases, 10, 100);
    done = leases.renew();
    store.renews[2]!.reject(new Error('down'));
    await done;
    await settle();
    expect(store.releases).toEqual([id, id2]);
    expect(failures).toEqual(['lease']);
  });

  it('renew leaves a lease alone while it grows', async () => {
    const store = standIn();
    const leases = make(store);
    leases.grow('ten_1', 10, '2026-11');
    await leases.renew();
    expect(store.renews).toHaveLength(0);
  });

  it('retire waits for the moves under way, then gives the lease back; a release that fails is reported', async () => {
    const store = standIn();
    const leases = make(store);
    const id = await opened(store, leases, 10, 100);
    unconfirmed();
    leases.take('ten_1', 'a', null, 10, '2026-11');
    const retired = leases.retire('ten_1');
    await settle();
    expect(store.releases).toEqual([]);
    store.moves[0]!.resolve('moved');
    await retired;
    expect(store.calls.slice(-2)).toEqual(['move a', `release ${id}`]);
    expect(await leases.retire('ten_1')).toBeUndefined(); // nothing left

    store.failReleases();
    await opened(store, leases, 10, 100);
    await leases.retire('ten_1');
    expect(failures).toEqual(['lease']);
  });

  it('a stop gives every lease back and waits for it; nothing opens afterwards', async () => {
    const store = standIn();
    const leases = make(store);
    const a = await opened(store, leases, 10, 100);
    leases.grow('ten_2', 10, '2026-11');
    const b = store.extends_[1]!;
    b.resolve({ granted: 40, total: 40, gone: false });
    await settle();
    unconfirmed();
    leases.take('ten_1', 'r', null, 10, '2026-11');
    let stopped = false;
    const stop = leases.stop().then(() => (stopped = true));
    await settle();
    expect(stopped).toBe(false); // the move is still under way
    store.moves[0]!.resolve('moved');
    await stop;
    expect(store.releases.sort()).toEqual([a, b.input.leaseId].sort());
    expect(leases.leased).toBe(0);
    leases.grow('ten_1', 10, '2026-11');
    expect(store.extends_).toHaveLength(2);
  });

  it('the idle sweep gives back a lease unused for idleSeconds with nothing under way, and stops when none is left', async () => {
    vi.useFakeTimers();
    const store = standIn();
    const leases = make(store);
    const id = await (async () => {
      leases.grow('ten_1', 10, '2026-11');
      const e = store.extends_[0]!;
      e.resolve({ granted: 100, total: 100, gone: false });
      await vi.advanceTimersByTimeAsync(0);
      return e.input.leaseId;
    })();
    leases.take('ten_1', 'c', null, 10, '2026-11'); // committed at `now`
    now += 2_000;
    await vi.advanceTimersByTimeAsync(1_000); // a sweep: idle long enough, but a request is committed inside it
    expect(store.releases).toEqual([]);
    leases.journaled('c'); // its settlement waits in the journal: it no longer keeps the lease
    unconfirmed();
    leases.take('ten_1', 'a', null, 10, '2026-11'); // used at `now`, its move under way
    now += 2_000;
    await vi.advanceTimersByTimeAsync(1_000); // idle long enough, but a move is under way
    expect(store.releases).toEqual([]);
    store.moves[0]!.resolve('moved');
    now -= 1; // 1 ms short of idle
    await vi.advanceTimersByTimeAsync(1_000);
    expect(store.moves).toHaveLength(1);
    now += 1;
    await vi.advanceTimersByTimeAsync(1_000);
    // Given back: the journaled commitment first moves into a hold of its own.
    expect(store.moves.map((m) => m.input)).toEqual([expect.objectContaining({ requestId: 'a' }), expect.objectContaining({ requestId: 'c', admitted: true })]);
    store.moves[1]!.resolve('moved');
    await vi.advanceTimersByTimeAsync(0);
    expect(store.releases).toEqual([id]);
    expect(leases.committed).toBe(0);
    expect(vi.getTimerCount()).toBe(0); // the sweep stopped with no lease left
  });

  it('a lease gone from the store is given back all the same (a no-op there), even when a later move of it fails; a newer lease of the tenant stays', async () => {
    const store = standIn();
    const leases = make(store);
    const old = await opened(store, leases, 10, 100);
    unconfirmed();
    const first = leases.take('ten_1', 'a', null, 10, '2026-11')!.moved!;
    const second = leases.take('ten_1', 'b', null, 10, '2026-11')!.moved!;
    store.moves[0]!.resolve('no_lease');
    await first;
    const newer = await (async () => {
      now += 1_000;
      return opened(store, leases, 10, 50);
    })();
    store.moves[1]!.reject(new Error('down'));
    expect(await second).toBe('failed');
    await settle();
    expect(store.releases).toEqual([old]);
    expect(leases.leased).toBe(50);
    unconfirmed();
    expect(leases.take('ten_1', 'c', null, 10, '2026-11')).not.toBeNull();
    expect(store.moves[2]!.input.leaseId).toBe(newer);
  });

  it('gone, even with an amount left (past its ttl in the store): forgotten, not given back', async () => {
    const store = standIn();
    const leases = make(store);
    await opened(store, leases, 10, 20);
    leases.take('ten_1', 'a', null, 10, '2026-11'); // 10 left: grows
    store.extends_[1]!.resolve({ granted: 0, total: 20, gone: true });
    await settle();
    expect(leases.leased).toBe(0);
    expect(leases.take('ten_1', 'b', null, 10, '2026-11')).toBeNull();
    expect(store.releases).toEqual([]);
  });

  it('holds is false for a lease with nothing left and no growth under way', async () => {
    const store = standIn();
    const leases = make(store);
    await opened(store, leases, 10, 10);
    leases.take('ten_1', 'a', null, 10, '2026-11'); // nothing left: grows
    store.extends_[1]!.resolve({ granted: 0, total: 10, gone: false }); // refused; the store's lease still holds the piece under way
    await settle();
    expect(leases.holds('ten_1')).toBe(false);
    expect(leases.leased).toBe(0);
  });

  it('one sweep timer for every lease; a stop clears it; a sweep keeps a cooldown until it ends', async () => {
    vi.useFakeTimers();
    const store = standIn();
    const leases = make(store);
    leases.grow('ten_1', 10, '2026-11');
    leases.grow('ten_2', 10, '2026-11');
    expect(vi.getTimerCount()).toBe(1);
    store.extends_[0]!.resolve({ granted: 100, total: 100, gone: false });
    store.extends_[1]!.resolve({ granted: 0, total: 0, gone: false }); // ten_2 refused: cools down
    await vi.advanceTimersByTimeAsync(0);
    now += 500;
    await vi.advanceTimersByTimeAsync(1_000); // a sweep inside ten_2's cooldown
    leases.grow('ten_2', 10, '2026-11');
    expect(store.extends_).toHaveLength(2);
    await leases.stop();
    expect(vi.getTimerCount()).toBe(0);
  });
});

