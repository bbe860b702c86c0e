/**
 * One contract suite for every Store implementation (memory and Redis), plus
 * Redis-only tests: key layout, hot-path round trips, corrupt data, prefix
 * isolation, and outages (killed / paused redis-server) surfacing as
 * StoreUnavailableError quickly and healing without recreating the store.
 *
 * Redis tests start their own redis-server through the harness (never the
 * shared one on 6379) and give every store a fresh prefix instead of flushing.
 */
import { createHash, randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  type KeyRecord,
  type Store,
  type TenantRecord,
  StoreConflictError,
  StoreUnavailableError,
} from '../../sidecar/src/store/contract.js';
import { createMemoryStore } from '../../sidecar/src/store/memory.js';
import { StoreDataError } from '../../sidecar/src/store/records.js';
import { createRedisStore } from '../../sidecar/src/store/redis.js';
import { freePort } from '../harness/ports.js';
import { type RedisServer, startRedis } from '../harness/redis.js';
import { type RedisCluster, startRedisCluster } from '../harness/redis-cluster.js';

// ---------------------------------------------------------------- fixtures

type Writable<V> = V extends readonly (infer U)[] ? U[] : V;
type Mutable<T> = { -readonly [K in keyof T]: Writable<T[K]> };

let seq = 0;

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

function at(second: number): string {
  return new Date(Date.UTC(2025, 0, 1, 0, 0, second)).toISOString();
}

function tenant(over: Partial<TenantRecord> = {}): TenantRecord {
  seq += 1;
  return { id: `ten_${seq}`, name: `Tenant ${seq}`, createdAt: at(seq % 60), ...over };
}

function key(over: Partial<KeyRecord> = {}): KeyRecord {
  seq += 1;
  const secret = `sk-test-${randomBytes(24).toString('base64url')}`;
  return {
    id: `key_${seq}_${randomBytes(4).toString('hex')}`,
    tenantId: 'ten_a',
    hash: sha256(secret),
    last4: secret.slice(-4),
    name: `key ${seq}`,
    scopes: ['chat.completions'],
    allowedIps: null,
    status: 'active',
    createdAt: at(seq % 60),
    revokedAt: null,
    ...over,
  };
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected the promise to reject');
    },
    (err: unknown) => err,
  );
}

/** The rejection reason, asserting it arrived within `ms`. */
async function rejectsWithin(promise: Promise<unknown>, ms: number): Promise<unknown> {
  const started = performance.now();
  const err = await rejection(promise);
  expect(performance.now() - started).toBeLessThan(ms);
  return err;
}

async function eventually<T>(fn: () => Promise<T>, timeoutMs = 5_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

function uniquePrefix(): string {
  return `t${randomBytes(6).toString('hex')}`;
}

// ---------------------------------------------------------------- contract

export function describeStoreContract(name: string, makeStore: () => Store | Promise<Store>): void {
  describe(`Store contract: ${name}`, () => {
    let store: Store;

    beforeEach(async () => {
      store = await makeStore();
    });
    afterEach(async () => {
      await store.close();
    });

    it('reports its kind', () => {
      expect(store.kind).toBe(name.split(' ')[0]); // a Cluster store is a redis store
    });

    it('creates and reads tenants; lists them by createdAt', async () => {
      const later = tenant({ createdAt: at(30) });
      const earlier = tenant({ createdAt: at(10) });
      await store.createTenant(later);
      await store.createTenant(earlier);
      expect(await store.getTenant(later.id)).toEqual(later);
      expect(await store.getTenant(earlier.id)).toEqual(earlier);
      expect(await store.listTenants()).toEqual([earlier, later]);
    });

    it('refuses a duplicate tenant and keeps the original', async () => {
      const t = tenant();
      await store.createTenant(t);
      await expect(store.createTenant({ ...t, name: 'impostor' })).rejects.toBeInstanceOf(
        StoreConflictError,
      );
      expect(await store.getTenant(t.id)).toEqual(t);
      expect(await store.listTenants()).toEqual([t]);
    });

    it('creates a key and finds it by hash and by id', async () => {
      const k = key();
      await store.createKey(k);
      expect(await store.getKeyByHash(k.hash)).toEqual(k);
      expect(await store.getKeyById(k.id)).toEqual(k);
    });

    it('refuses a duplicate id and leaves nothing of the refused key', async () => {
      const first = key();
      await store.createKey(first);
      const dup = key({ id: first.id });
      await expect(store.createKey(dup)).rejects.toBeInstanceOf(StoreConflictError);
      expect(await store.getKeyByHash(dup.hash)).toBeNull();
      expect(await store.getKeyById(first.id)).toEqual(first);
      expect(await store.listKeys(first.tenantId)).toEqual([first]);
    });

    it('refuses a duplicate hash and leaves nothing of the refused key', async () => {
      const first = key();
      await store.createKey(first);
      const dup = key({ hash: first.hash, tenantId: 'ten_b' });
      await expect(store.createKey(dup)).rejects.toBeInstanceOf(StoreConflictError);
      expect(await store.getKeyById(dup.id)).toBeNull();
      expect(await store.getKeyByHash(first.hash)).toEqual(first);
      expect(await store.listKeys('ten_b')).toEqual([]);
      expect(await store.listKeys(first.tenantId)).toEqual([first]);
      expect(await store.revokeKey(dup.id, at(59))).toBeNull();
      // The refused id was not left claimed.
      const retry = key({ id: dup.id, tenantId: 'ten_b' });
      await store.createKey(retry);
      expect(await store.getKeyById(dup.id)).toEqual(retry);
    });

    it('lets exactly one of several racing creates with the same hash win', async () => {
      const hash = key().hash;
      const racers = Array.from({ length: 8 }, () => key({ hash }));
      const results = await Promise.allSettled(racers.map((k) => store.createKey(k)));
      const won = results.flatMap((r, i) => (r.status === 'fulfilled' ? [racers[i]] : []));
      expect(won).toHaveLength(1);
      for (const r of results) {
        if (r.status === 'rejected') expect(r.reason).toBeInstanceOf(StoreConflictError);
      }
      const winner = won[0]!;
      expect(await store.getKeyByHash(hash)).toEqual(winner);
      expect(await store.listKeys('ten_a')).toEqual([winner]);
      for (const k of racers) {
        if (k !== winner) expect(await store.getKeyById(k.id)).toBeNull();
      }
    });

    it('lists keys oldest first, scoped to the tenant', async () => {
      const a2 = key({ tenantId: 'ten_a', createdAt: at(20) });
      const a1 = key({ tenantId: 'ten_a', createdAt: at(10) });
      const b1 = key({ tenantId: 'ten_b', createdAt: at(5) });
      const a3 = key({ tenantId: 'ten_a', createdAt: at(30) });
      const a3bis = key({ tenantId: 'ten_a', createdAt: at(30) }); // same instant: insertion order
      for (const k of [a2, a1, b1, a3, a3bis]) await store.createKey(k);
      expect(await store.listKeys('ten_a')).toEqual([a1, a2, a3, a3bis]);
      expect(await store.listKeys('ten_b')).toEqual([b1]);
      expect(await store.listKeys('ten_none')).toEqual([]);
    });

    it('revokes idempotently, keeping the first revokedAt, visible by hash, id and list', async () => {
      const k = key();
      await store.createKey(k);
      const expected: KeyRecord = { ...k, status: 'revoked', revokedAt: at(40) };
      expect(await store.revokeKey(k.id, at(40))).toEqual(expected);
      expect(await store.revokeKey(k.id, at(50))).toEqual(expected);
      expect(await store.getKeyByHash(k.hash)).toEqual(expected);
      expect(await store.getKeyById(k.id)).toEqual(expected);
      expect(await store.listKeys(k.tenantId)).toEqual([expected]);
    });

    it('keeps one revokedAt under concurrent revokes', async () => {
      const k = key();
      await store.createKey(k);
      const results = await Promise.all(
        [41, 42, 43, 44, 45].map((s) => store.revokeKey(k.id, at(s))),
      );
      const stored = await store.getKeyByHash(k.hash);
      expect(stored?.status).toBe('revoked');
      for (const r of results) expect(r).toEqual(stored);
    });

    it('returns null for unknown ids and hashes', async () => {
      await store.createKey(key());
      expect(await store.getTenant('ten_missing')).toBeNull();
      expect(await store.getKeyById('key_missing')).toBeNull();
      expect(await store.getKeyByHash(sha256('not a stored key'))).toBeNull();
      expect(await store.revokeKey('key_missing', at(1))).toBeNull();
    });

    it('hands out copies: mutating inputs or results never changes the store', async () => {
      const t = tenant();
      const k = key({ allowedIps: ['10.0.0.0/8'] });
      const tInput = { ...t } as Mutable<TenantRecord>;
      const kInput = { ...k, scopes: [...k.scopes], allowedIps: ['10.0.0.0/8'] } as Mutable<KeyRecord>;
      await store.createTenant(tInput);
      await store.createKey(kInput);
      tInput.name = 'changed';
      kInput.name = 'changed';
      kInput.scopes.push('admin');
      kInput.allowedIps?.push('0.0.0.0/0');

      const fromHash = (await store.getKeyByHash(k.hash)) as Mutable<KeyRecord>;
      fromHash.status = 'revoked';
      fromHash.scopes.push('admin');
      fromHash.allowedIps?.push('0.0.0.0/0');
      const fromList = (await store.listKeys(k.tenantId)) as Mutable<KeyRecord>[];
      fromList[0]!.scopes.push('admin');
      fromList.pop();
      const fromTenant = (await store.getTenant(t.id)) as Mutable<TenantRecord>;
      fromTenant.name = 'changed';
      const tenants = (await store.listTenants()) as Mutable<TenantRecord>[];
      tenants[0]!.name = 'changed';

      expect(await store.getKeyByHash(k.hash)).toEqual(k);
      expect(await store.getKeyById(k.id)).toEqual(k);
      expect(await store.listKeys(k.tenantId)).toEqual([k]);
      expect(await store.getTenant(t.id)).toEqual(t);
      expect(await store.listTenants()).toEqual([t]);

      const revokedRecord = (await store.revokeKey(k.id, at(7))) as Mutable<KeyRecord>;
      revokedRecord.revokedAt = null;
      revokedRecord.scopes.push('admin');
      expect(await store.getKeyByHash(k.hash)).toEqual({ ...k, status: 'revoked', revokedAt: at(7) });
    });

    it('round-trips allowedIps null, empty and v4/v6 lists, and empty scopes', async () => {
      const none = key({ allowedIps: null });
      const empty = key({ allowedIps: [], scopes: [] });
      const list = key({ allowedIps: ['192.0.2.7', '10.0.0.0/8', '2001:db8::/32', '::1'] });
      for (const k of [none, empty, list]) await store.createKey(k);
      expect((await store.getKeyByHash(none.hash))?.allowedIps).toBeNull();
      expect(await store.getKeyByHash(empty.hash)).toEqual(empty);
      expect(await store.getKeyById(list.id)).toEqual(list);
    });

    it('returns exactly the contract fields (no extras stored)', async () => {
      const k = key();
      await store.createKey({ ...k, secret: 'sk-live-must-not-be-stored' } as KeyRecord);
      expect(await store.getKeyByHash(k.hash)).toStrictEqual(k);
    });

    it('rejects invalid records with TypeError and stores nothing', async () => {
      const bad = key({ hash: 'ABC' });
      await expect(store.createKey(bad)).rejects.toBeInstanceOf(TypeError);
      expect(await store.getKeyById(bad.id)).toBeNull();
      await expect(store.createTenant({ id: '', name: 'x', createdAt: at(1) })).rejects.toBeInstanceOf(
        TypeError,
      );
      expect(await store.listTenants()).toEqual([]);
    });

    it('pings while open; after close every call rejects with StoreUnavailableError', async () => {
      await expect(store.ping()).resolves.toBeUndefined();
      await store.close();
      await store.close(); // idempotent
      await expect(store.ping()).rejects.toBeInstanceOf(StoreUnavailableError);
      await expect(store.getKeyByHash(sha256('x'))).rejects.toBeInstanceOf(StoreUnavailableError);
    });
  });
}

// ---------------------------------------------------------------- memory

describeStoreContract('memory', () => createMemoryStore());

// ---------------------------------------------------------------- redis

describe('redis', () => {
  let server: RedisServer;
  let raw: Redis;
  const opened: Store[] = [];

  function redisStore(prefix = uniquePrefix()): Store {
    const store = createRedisStore({ url: server.url, prefix });
    opened.push(store);
    return store;
  }

  beforeAll(async () => {
    server = await startRedis();
    raw = new Redis(server.url);
  });
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((s) => s.close()));
  });
  afterAll(async () => {
    raw?.disconnect();
    await server?.stop();
  });

  describeStoreContract('redis', () => redisStore());

  describe('redis-only', () => {
    it('uses the documented key layout under its prefix', async () => {
      const prefix = uniquePrefix();
      const store = redisStore(prefix);
      const t = tenant({ id: 'ten_layout' });
      const k = key({ tenantId: t.id });
      await store.createTenant(t);
      await store.createKey(k);
      expect((await raw.keys(`${prefix}:*`)).sort()).toEqual(
        [
          `${prefix}:key:h:${k.hash}`,
          `${prefix}:key:id:${k.id}`,
          `${prefix}:tenant:{ten_layout}`,
          `${prefix}:tenant:{ten_layout}:keys`,
          `${prefix}:tenants`,
        ].sort(),
      );
      expect(JSON.parse((await raw.get(`${prefix}:key:h:${k.hash}`))!)).toEqual(k);
      expect(await raw.get(`${prefix}:key:id:${k.id}`)).toBe(k.hash);
      expect(JSON.parse((await raw.get(`${prefix}:tenant:{ten_layout}`))!)).toEqual(t);
      expect(await raw.lrange(`${prefix}:tenant:{ten_layout}:keys`, 0, -1)).toEqual([k.id]);
      expect(await raw.smembers(`${prefix}:tenants`)).toEqual([t.id]);
    });

    it('encodes ids so they cannot forge keys or hash tags', async () => {
      const prefix = uniquePrefix();
      const store = redisStore(prefix);
      const plain = tenant({ id: 'x' });
      const tricky = tenant({ id: 'x}:keys' });
      await store.createTenant(plain);
      await store.createTenant(tricky);
      await store.createKey(key({ tenantId: 'x' }));
      expect(await store.getTenant('x}:keys')).toEqual(tricky);
      expect(await store.listKeys('x}:keys')).toEqual([]);
      expect(await raw.get(`${prefix}:tenant:{x%7D%3Akeys}`)).not.toBeNull();
      expect(await raw.llen(`${prefix}:tenant:{x}:keys`)).toBe(1);
    });

    it('leaves no stray keys after conflicts', async () => {
      const prefix = uniquePrefix();
      const store = redisStore(prefix);
      const first = key();
      await store.createKey(first);
      const before = (await raw.keys(`${prefix}:*`)).sort();
      await expect(store.createKey(key({ hash: first.hash, tenantId: 'ten_b' }))).rejects.toBeInstanceOf(
        StoreConflictError,
      );
      await expect(store.createKey(key({ id: first.id }))).rejects.toBeInstanceOf(StoreConflictError);
      expect((await raw.keys(`${prefix}:*`)).sort()).toEqual(before);
      expect(await raw.lrange(`${prefix}:tenant:{ten_b}:keys`, 0, -1)).toEqual([]);
    });

    it('looks a key up by hash in exactly one GET', async () => {
      const store = redisStore();
      const k = key();
      await store.createKey(k);
      await raw.config('RESETSTAT');
      expect(await store.getKeyByHash(k.hash)).toEqual(k);
      const stats = (await raw.info('commandstats'))
        .split('\r\n')
        .filter((line) => line.startsWith('cmdstat_'))
        .map((line) => line.replace(/^cmdstat_([^:]+):calls=(\d+).*$/, '$1=$2'))
        .filter((line) => !/^(config|info)(\|\w+)?=/.test(line));
      expect(stats).toEqual(['get=1']);
    });

    it('keeps stores with different prefixes apart', async () => {
      const a = redisStore();
      const b = redisStore();
      const t = tenant();
      const k = key();
      await a.createTenant(t);
      await a.createKey(k);
      expect(await b.getTenant(t.id)).toBeNull();
      expect(await b.listTenants()).toEqual([]);
      expect(await b.getKeyByHash(k.hash)).toBeNull();
      expect(await b.getKeyById(k.id)).toBeNull();
      expect(await b.listKeys(k.tenantId)).toEqual([]);
      // The same ids are free in the other prefix.
      await b.createTenant(t);
      await b.createKey(k);
      expect(await b.revokeKey(k.id, at(3))).toMatchObject({ status: 'revoked' });
      expect(await a.getKeyByHash(k.hash)).toEqual(k);
    });

    it('throws StoreDataError on corrupt stored data instead of reading it as absent', async () => {
      const prefix = uniquePrefix();
      const store = redisStore(prefix);
      const k = key();
      await raw.set(`${prefix}:key:h:${k.hash}`, '{not json');
      const err = await rejection(store.getKeyByHash(k.hash));
      expect(err).toBeInstanceOf(StoreDataError);
      expect(err).not.toBeInstanceOf(StoreUnavailableError);
      expect((err as Error).message).toContain(`${prefix}:key:h:${k.hash}`);

      const other = key();
      await raw.set(`${prefix}:key:h:${other.hash}`, JSON.stringify(k)); // stored under the wrong hash
      await expect(store.getKeyByHash(other.hash)).rejects.toBeInstanceOf(StoreDataError);

      await raw.set(`${prefix}:tenant:{ten_bad}`, JSON.stringify({ id: 'ten_bad' }));
      await expect(store.getTenant('ten_bad')).rejects.toBeInstanceOf(StoreDataError);
    });

    it('works right after creation and rejects bad options', async () => {
      const store = redisStore();
      await store.ping(); // no wait for "ready" by the caller
      expect(() => createRedisStore({ url: server.url, prefix: 'a:b' })).toThrow(TypeError);
      expect(() => createRedisStore({ url: server.url, prefix: 'x', commandTimeoutMs: 0 })).toThrow(
        TypeError,
      );
    });

    it('fails fast with StoreUnavailableError when Redis was never reachable', async () => {
      const port = await freePort(); // nothing listens there
      const store = createRedisStore({ url: `redis://127.0.0.1:${port}`, prefix: 'svc' });
      opened.push(store);
      expect(await rejectsWithin(store.ping(), 2_000)).toBeInstanceOf(StoreUnavailableError);
      expect(await rejectsWithin(store.getKeyByHash(sha256('k')), 2_000)).toBeInstanceOf(
        StoreUnavailableError,
      );
      expect(await rejectsWithin(store.createTenant(tenant()), 2_000)).toBeInstanceOf(
        StoreUnavailableError,
      );
    });
  });
});

// ---------------------------------------------------------------- redis cluster

describe('redis cluster', () => {
  let cluster: RedisCluster;
  const opened: Store[] = [];

  beforeAll(async () => {
    cluster = await startRedisCluster();
  });
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((s) => s.close()));
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  describeStoreContract('redis cluster', () => {
    const store = createRedisStore({ clusterNodes: cluster.urls, prefix: uniquePrefix() });
    opened.push(store);
    return store;
  });
});

describe('redis cluster readiness', () => {
  it('ping needs a reachable master for every slot: one master killed (no replica to take over) and it rejects', async () => {
    const cluster = await startRedisCluster();
    const store = createRedisStore({ clusterNodes: cluster.urls, prefix: uniquePrefix() });
    try {
      await store.ping();
      await cluster.kill(await cluster.masterPortFor('any-key'));
      await expect(store.ping()).rejects.toBeInstanceOf(StoreUnavailableError);
      // Still refused later: the other masters answer, but a third of the slots has none.
      await new Promise((r) => setTimeout(r, 300));
      await expect(store.ping()).rejects.toBeInstanceOf(StoreUnavailableError);
    } finally {
      await store.close();
      await cluster.stop();
    }
  }, 30_000);
});

describe('redis outages', () => {
  let server: RedisServer;
  const opened: Store[] = [];

  beforeAll(async () => {
    server = await startRedis();
  });
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((s) => s.close()));
  });
  afterAll(async () => {
    await server?.stop();
  });

  function redisStore(): Store {
    const store = createRedisStore({ url: server.url, prefix: uniquePrefix() });
    opened.push(store);
    return store;
  }

  it('rejects quickly while redis-server is down and recovers after a restart', async () => {
    const store = redisStore();
    const k = key();
    await store.createKey(k);
    expect(await store.getKeyByHash(k.hash)).toEqual(k);

    await server.kill();
    expect(await rejectsWithin(store.getKeyByHash(k.hash), 2_000)).toBeInstanceOf(StoreUnavailableError);
    expect(await rejectsWithin(store.ping(), 2_000)).toBeInstanceOf(StoreUnavailableError);
    expect(await rejectsWithin(store.getKeyById(k.id), 2_000)).toBeInstanceOf(StoreUnavailableError);
    expect(await rejectsWithin(store.createKey(key()), 2_000)).toBeInstanceOf(StoreUnavailableError);

    await server.restart(); // same port, fresh empty server
    await eventually(() => store.ping());
    expect(await store.getKeyByHash(k.hash)).toBeNull();
    await store.createKey(k);
    expect(await store.getKeyById(k.id)).toEqual(k);
  });

  it('rejects quickly while redis-server hangs (paused) and recovers when it resumes', async () => {
    const store = redisStore(); // default timeouts
    const k = key();
    await store.createKey(k);

    await server.pause();
    try {
      expect(await rejectsWithin(store.getKeyByHash(k.hash), 2_000)).toBeInstanceOf(
        StoreUnavailableError,
      );
      expect(await rejectsWithin(store.ping(), 2_000)).toBeInstanceOf(StoreUnavailableError);
    } finally {
      await server.resume();
    }
    await eventually(() => store.ping());
    expect(await store.getKeyByHash(k.hash)).toEqual(k);
  });

  it('close() returns promptly even while redis-server is down', async () => {
    const store = redisStore();
    await store.ping();
    await server.kill();
    const started = performance.now();
    await store.close();
    expect(performance.now() - started).toBeLessThan(2_000);
    await expect(store.ping()).rejects.toBeInstanceOf(StoreUnavailableError);
    await server.restart();
  });
});
