/**
 * One contract suite for the account records (memory and Redis): members and
 * roles with the last-owner rule (also under concurrent changes), tombstones,
 * key people, cards, auto top-up settings, tiers and idempotency claims. Redis
 * runs on its own redis-server (never the shared one), a fresh prefix per test.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AccountStore, IdempotencyRecord, Member } from '../../sidecar/src/store/account-contract.js';
import { createMemoryAccountStore } from '../../sidecar/src/store/memory-accounts.js';
import { createRedisAccountStore } from '../../sidecar/src/store/redis-accounts.js';
import { type RedisServer, startRedis } from '../harness/redis.js';

let redis: RedisServer;
const opened: AccountStore[] = [];
beforeAll(async () => {
  redis = await startRedis();
}, 30_000);
afterAll(async () => {
  await Promise.all(opened.map((s) => s.close()));
  await redis?.stop();
});

const member = (personId: string, role: Member['role'], addedAt = '2026-01-01T00:00:00.000Z'): Member => ({ personId, role, addedAt });
const pending: IdempotencyRecord = { fingerprint: 'f1', state: 'pending', status: 0, body: null, createdAt: '2026-01-01T00:00:00.000Z' };

const kinds: Array<[string, () => AccountStore]> = [
  ['memory', () => createMemoryAccountStore()],
  [
    'redis',
    () => {
      const s = createRedisAccountStore({ url: redis.url, prefix: `t${randomBytes(4).toString('hex')}` });
      opened.push(s);
      return s;
    },
  ],
];

describe.each(kinds)('%s account store', (_kind, make) => {
  it('adds, lists, changes and removes members; a removed person leaves a tombstone and can be added again', async () => {
    const s = make();
    expect(await s.addMember('w', member('usr_o', 'owner'))).toBe(true);
    expect(await s.addMember('w', member('usr_m', 'member', '2026-01-02T00:00:00.000Z'))).toBe(true);
    expect(await s.addMember('w', member('usr_m', 'admin'))).toBe(false);
    expect((await s.listMembers('w')).map((m) => `${m.personId}:${m.role}`)).toEqual(['usr_o:owner', 'usr_m:member']);
    expect(await s.setRole('w', 'usr_m', 'admin')).toBe('ok');
    expect(await s.getMember('w', 'usr_m')).toMatchObject({ role: 'admin' });
    expect(await s.removeMember('w', 'usr_m')).toBe('ok');
    expect(await s.getMember('w', 'usr_m')).toBe('removed');
    expect(await s.setRole('w', 'usr_m', 'admin')).toBe('not_found');
    expect(await s.removeMember('w', 'usr_x')).toBe('not_found');
    expect(await s.getMember('w', 'usr_x')).toBeNull();
    expect((await s.listMembers('w')).map((m) => m.personId)).toEqual(['usr_o']);
    expect(await s.addMember('w', member('usr_m', 'member'))).toBe(true);
    expect(await s.listMembers('other')).toEqual([]);
  });

  it('a workspace always keeps an owner, also when two owners demote each other at once', async () => {
    const s = make();
    await s.putMember('w', member('a', 'owner'));
    expect(await s.setRole('w', 'a', 'admin')).toBe('last_owner');
    expect(await s.removeMember('w', 'a')).toBe('last_owner');
    await s.putMember('w', member('b', 'owner'));
    const results = await Promise.all([s.setRole('w', 'a', 'member'), s.setRole('w', 'b', 'member')]);
    expect(results.sort()).toEqual(['last_owner', 'ok']);
    expect((await s.listMembers('w')).filter((m) => m.role === 'owner')).toHaveLength(1);
    const r = await Promise.all([s.removeMember('w', 'a'), s.removeMember('w', 'b')]);
    expect(r).toContain('last_owner');
    expect((await s.listMembers('w')).filter((m) => m.role === 'owner')).toHaveLength(1);
  });

  it('keeps key people, cards, auto top-up settings and tiers; null clears', async () => {
    const s = make();
    expect(await s.getKeyPerson('key_1')).toBeNull();
    await s.setKeyPerson('key_1', 'usr_1');
    expect(await s.getKeyPerson('key_1')).toBe('usr_1');
    const card = { token: 'tok_1', brand: 'visa', last4: '4242', savedAt: '2026-01-01T00:00:00.000Z' };
    await s.setCard('w', card);
    expect(await s.getCard('w')).toEqual(card);
    await s.setCard('w', null);
    expect(await s.getCard('w')).toBeNull();
    const auto = { enabled: true, threshold: 5, amount: 10, tierId: null, disabledReason: null, updatedAt: '2026-01-01T00:00:00.000Z' };
    await s.setAutoTopup('w', auto);
    expect(await s.getAutoTopup('w')).toEqual(auto);
    expect(await s.getTiers()).toBeNull();
    await s.setTiers([{ id: 't', amount: 1, label: '' }]);
    expect(await s.getTiers()).toEqual([{ id: 't', amount: 1, label: '' }]);
    await s.setTiers(null);
    expect(await s.getTiers()).toBeNull();
  });

  it('counts events per workspace, counter and minute', async () => {
    const s = make();
    const counts = await Promise.all(Array.from({ length: 5 }, () => s.countInWindow('w', 'topup', 100)));
    expect(counts.sort()).toEqual([1, 2, 3, 4, 5]);
    expect(await s.countInWindow('w', 'topup', 101)).toBe(1);
    expect(await s.countInWindow('w', 'other', 100)).toBe(1);
    expect(await s.countInWindow('w2', 'topup', 100)).toBe(1);
  });

  it('an Idempotency-Key is claimed once; finished records are returned; a dropped claim can be taken again', async () => {
    const s = make();
    const claims = await Promise.all(Array.from({ length: 20 }, () => s.claimIdempotency('w', 'k', pending)));
    expect(claims.filter((c) => c === null)).toHaveLength(1);
    await s.finishIdempotency('w', 'k', { ...pending, state: 'done', status: 201, body: { id: 'x' } });
    expect(await s.claimIdempotency('w', 'k', pending)).toMatchObject({ state: 'done', status: 201, body: { id: 'x' } });
    expect(await s.claimIdempotency('other', 'k', pending)).toBeNull(); // per workspace
    await s.claimIdempotency('w', 'k2', pending);
    await s.dropIdempotency('w', 'k2');
    expect(await s.claimIdempotency('w', 'k2', pending)).toBeNull();
  });
});
