/** KeyCache: found active keys are kept for the TTL; misses, revoked keys and a zero TTL always ask the store. */
import { describe, expect, it } from 'vitest';
import { KeyCache } from '../../sidecar/src/domain/auth/key-cache.js';
import type { KeyRecord } from '../../sidecar/src/store/contract.js';

const rec = (id: string, status: KeyRecord['status'] = 'active'): KeyRecord => ({
  id, tenantId: 'ten_1', hash: `h_${id}`, last4: 'abcd', name: id, scopes: ['ai'], allowedIps: null,
  status, createdAt: '2026-01-01T00:00:00Z', revokedAt: status === 'revoked' ? '2026-01-02T00:00:00Z' : null,
});

/** A store of records by hash that counts its lookups. */
function store(records: Record<string, KeyRecord | null>) {
  const calls: string[] = [];
  const load = async (hash: string) => (calls.push(hash), records[hash] ?? null);
  return { load, calls };
}

describe('KeyCache', () => {
  it('a found active key is served from memory until its TTL runs out', async () => {
    let now = 1_000;
    const cache = new KeyCache(500, 100, () => now);
    const s = store({ a: rec('a') });
    expect((await cache.get('a', s.load))?.id).toBe('a');
    now = 1_499;
    expect((await cache.get('a', s.load))?.id).toBe('a');
    expect(s.calls).toEqual(['a']);
    now = 1_500;
    await cache.get('a', s.load);
    expect(s.calls).toEqual(['a', 'a']);
  });

  it('unknown and revoked keys are never cached', async () => {
    const cache = new KeyCache(60_000);
    const s = store({ r: rec('r', 'revoked') });
    for (let i = 0; i < 2; i++) {
      expect(await cache.get('nope', s.load)).toBeNull();
      expect((await cache.get('r', s.load))?.status).toBe('revoked');
    }
    expect(s.calls).toEqual(['nope', 'r', 'nope', 'r']);
  });

  it('a key found revoked on reload replaces the cached active one', async () => {
    let now = 0;
    const records: Record<string, KeyRecord> = { a: rec('a') };
    const cache = new KeyCache(10, 100, () => now);
    const s = store(records);
    await cache.get('a', s.load);
    records.a = rec('a', 'revoked');
    now = 10;
    expect((await cache.get('a', s.load))?.status).toBe('revoked');
    now = 11;
    expect((await cache.get('a', s.load))?.status).toBe('revoked');
    expect(s.calls).toEqual(['a', 'a', 'a']);
  });

  it('a TTL of 0 turns the cache off', async () => {
    const cache = new KeyCache(0);
    const s = store({ a: rec('a') });
    await cache.get('a', s.load);
    await cache.get('a', s.load);
    expect(s.calls).toEqual(['a', 'a']);
  });

  it('invalidate drops one key, clear drops all', async () => {
    const cache = new KeyCache(60_000);
    const s = store({ a: rec('a'), b: rec('b') });
    await cache.get('a', s.load);
    await cache.get('b', s.load);
    cache.invalidate('a');
    await cache.get('a', s.load);
    await cache.get('b', s.load);
    expect(s.calls).toEqual(['a', 'b', 'a']);
    cache.clear();
    await cache.get('a', s.load);
    await cache.get('b', s.load);
    expect(s.calls).toEqual(['a', 'b', 'a', 'a', 'b']);
  });

  it('at most maxEntries keys: a full cache starts over', async () => {
    const cache = new KeyCache(60_000, 2);
    const s = store({ a: rec('a'), b: rec('b'), c: rec('c') });
    await cache.get('a', s.load);
    await cache.get('b', s.load);
    await cache.get('b', s.load); // still cached: two entries fit
    expect(s.calls).toEqual(['a', 'b']);
    await cache.get('c', s.load); // full: emptied, then c kept
    await cache.get('c', s.load);
    await cache.get('a', s.load);
    expect(s.calls).toEqual(['a', 'b', 'c', 'a']);
  });
});
