import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Config } from '../../sidecar/src/config/schema.js';
import { createBroadcast, createKeyEvents, parseRetained, type KeyEvents } from '../../sidecar/src/store/key-events.js';
import { type RedisServer, startRedis } from '../harness/redis.js';
import { type RedisCluster, startRedisCluster } from '../harness/redis-cluster.js';
import { until } from '../harness/until.js';

/** Revocation messages between instances, over a real redis-server. */
let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

const eventsFor = (url: string) => createKeyEvents({ brand: 'svc', store: { kind: 'redis', url } } as unknown as Config);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Publishes `hash` from `from` until `seen` holds it (subscriptions are asynchronous); false after 8 s. */
async function delivered(from: KeyEvents, seen: Array<string | null>, hash: string): Promise<boolean> {
  for (let i = 0; i < 80; i++) {
    await from.publish(hash).catch(() => {});
    if (seen.includes(hash)) return true;
    await sleep(100);
  }
  return false;
}

describe('key events (Redis pub/sub)', () => {
  it('an instance that started while Redis was down still hears revocations once Redis is up, and is told to forget its cache', async () => {
    await redis.kill(); // the port is known, nothing answers
    const listener = eventsFor(redis.url);
    const seen: Array<string | null> = [];
    listener.subscribe((h) => seen.push(h));
    await sleep(1500); // several failed connection attempts
    await redis.restart();
    const publisher = eventsFor(redis.url);
    try {
      expect(await delivered(publisher, seen, 'hash-after-outage')).toBe(true);
      expect(seen).toContain(null); // subscribed (again): cached keys dropped
    } finally {
      await listener.close();
      await publisher.close();
    }
  });

  it('after a Redis restart, revocations keep arriving and the cache is flushed for what was missed', async () => {
    const listener = eventsFor(redis.url);
    const publisher = eventsFor(redis.url);
    const seen: Array<string | null> = [];
    listener.subscribe((h) => seen.push(h));
    try {
      expect(await delivered(publisher, seen, 'hash-before')).toBe(true);
      const gapsBefore = seen.filter((h) => h === null).length;
      await redis.restart();
      expect(await delivered(publisher, seen, 'hash-after-restart')).toBe(true);
      expect(seen.filter((h) => h === null).length).toBeGreaterThan(gapsBefore);
    } finally {
      await listener.close();
      await publisher.close();
    }
  });
});

describe('key events on a Redis Cluster', () => {
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await startRedisCluster();
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('a revocation published through one node reaches a subscriber connected to the cluster', async () => {
    const clusterEvents = () => createKeyEvents({ brand: 'svc', store: { kind: 'redis-cluster', nodes: cluster.urls } } as unknown as Config);
    const listener = clusterEvents();
    const publisher = clusterEvents();
    const seen: Array<string | null> = [];
    listener.subscribe((h) => seen.push(h));
    try {
      expect(await delivered(publisher, seen, 'hash-on-cluster')).toBe(true);
      expect(seen).toContain(null);
    } finally {
      await listener.close();
      await publisher.close();
    }
  });
  it('a retained publication (configuration reloads) is numbered, kept and delivered through the cluster', async () => {
    const cfg = { brand: 'svc', store: { kind: 'redis-cluster', nodes: cluster.urls } } as unknown as Config;
    const listener = createBroadcast(cfg);
    const publisher = createBroadcast(cfg);
    const seen: string[] = [];
    listener.subscribe('retained-test', (m) => m !== null && seen.push(m));
    try {
      let seq = 0;
      for (let i = 0; i < 80 && !seen.some((m) => parseRetained(m)?.message === 'payload'); i++) {
        seq = await publisher.publishRetained('retained-test', 'payload');
        await sleep(100);
      }
      // An earlier publication may have been the one heard first: the last one follows (subscribed by now).
      await until('the last publication to be delivered', () => seen.some((m) => parseRetained(m)?.seq === seq));
      expect(seen.map((m) => parseRetained(m))).toContainEqual({ seq, message: 'payload' });
      expect(await listener.latest('retained-test')).toEqual({ seq, message: 'payload' });
    } finally {
      await listener.close();
      await publisher.close();
    }
  });
});
