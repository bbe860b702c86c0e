import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigReloader } from '../../sidecar/src/adapters/config-reloader.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import type { Config } from '../../sidecar/src/config/schema.js';
import { LiveConfig } from '../../sidecar/src/domain/live-config.js';
import { createBroadcast, parseRetained, type Broadcast } from '../../sidecar/src/store/key-events.js';
import { type RedisServer, startRedis } from '../harness/redis.js';
import { until } from '../harness/until.js';

/**
 * A reload reaches every instance over Redis pub/sub. A message is lost when
 * the receiving instance's subscription is down at that moment; the
 * publication is also kept in Redis, numbered, and an instance that missed it
 * applies it when it subscribes again (or at its next periodic look).
 */
let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

const base = parseConfig(defaultConfig('svc'));
const movedQuick = (): Config => {
  const raw = JSON.parse(JSON.stringify(base));
  raw.models[0].model = 'sim-core-1';
  return parseConfig(raw);
};
const quickModel = (live: LiveConfig) => live.current.config.models.find((f) => f.alias === 'svc-quick')!.model;
const silent = pino({ level: 'silent' });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A real Redis broadcast whose deliveries to this instance can be dropped (its subscription "down"). */
function deafenable(inner: Broadcast) {
  let deaf = false;
  const listeners: Array<(m: string | null) => void> = [];
  /** Subscribed (Redis confirmed it); reads of the latest publication under way, and answered. */
  let subscribed = false;
  let looking = 0;
  let looked = 0;
  const broadcast: Broadcast = {
    publish: (t, m) => inner.publish(t, m),
    publishRetained: (t, m) => inner.publishRetained(t, m),
    latest(t) {
      looking++;
      const read = inner.latest(t);
      void read.then(() => looked++, () => {}).finally(() => looking--);
      return read;
    },
    subscribe(topic, listener) {
      listeners.push(listener);
      inner.subscribe(topic, (m) => {
        if (m === null) subscribed = true;
        if (!deaf) listener(m);
      });
    },
    close: () => inner.close(),
  };
  return {
    broadcast,
    /** Subscribed, and the first look at what was published before has answered, with none still under way. */
    settled: () => subscribed && looked > 0 && looking === 0,
    deafen: () => (deaf = true),
    /** The subscription is back: listeners are told they may have missed messages. */
    resubscribe: () => {
      deaf = false;
      for (const l of listeners) l(null);
    },
  };
}

const cfgFor = (brand: string) => ({ ...base, brand, store: { kind: 'redis', url: redis.url } }) as unknown as Config;

async function instance(brand: string, load: () => Config = () => base) {
  const wire = deafenable(createBroadcast(cfgFor(brand)));
  const live = new LiveConfig(base);
  const reloader = new ConfigReloader({ live, log: silent, broadcast: wire.broadcast, load, applied: () => {} });
  // Subscribed, first look at what was published before (a fresh connection: how long it takes is the box's).
  await until('the instance subscribed to the broadcast', wire.settled);
  return { ...wire, live, reloader };
}

describe('configuration reload: an instance that missed the broadcast', () => {
  it('hears a reload while listening (the control case)', async () => {
    const a = await instance('t1', movedQuick);
    const b = await instance('t1');
    try {
      expect((await a.reloader.reload('api')).ok).toBe(true);
      await until('the reload applied on the other instance', () => quickModel(b.live) === 'sim-core-1');
    } finally {
      await a.broadcast.close();
      await b.broadcast.close();
    }
  });

  it('applies a reload it did not hear once its subscription is back', async () => {
    const a = await instance('t2', movedQuick);
    const b = await instance('t2');
    try {
      b.deafen();
      expect((await a.reloader.reload('api')).ok).toBe(true);
      await sleep(200);
      expect(quickModel(b.live)).toBe('sim-quick-1'); // missed
      b.resubscribe();
      await until('the reload applied on the other instance', () => quickModel(b.live) === 'sim-core-1');
      expect(b.live.current.generation).toBe(1);
    } finally {
      await a.broadcast.close();
      await b.broadcast.close();
    }
  });

  it('applies it at the next periodic look, even without a new subscription, and only once', async () => {
    const a = await instance('t3', movedQuick);
    const b = await instance('t3');
    try {
      b.deafen();
      await a.reloader.reload('api');
      await sleep(200);
      expect(quickModel(b.live)).toBe('sim-quick-1');
      await b.reloader.catchUp();
      expect(quickModel(b.live)).toBe('sim-core-1');
      const generation = b.live.current.generation;
      await b.reloader.catchUp();
      b.resubscribe();
      await sleep(200);
      expect(b.live.current.generation).toBe(generation);
    } finally {
      await a.broadcast.close();
      await b.broadcast.close();
    }
  });

  it('an instance started after a reload keeps the configuration it started with (its own file)', async () => {
    const a = await instance('t4', movedQuick);
    try {
      await a.reloader.reload('api');
      const late = await instance('t4');
      try {
        await late.reloader.catchUp();
        late.resubscribe();
        await sleep(200);
        expect(quickModel(late.live)).toBe('sim-quick-1');
        expect(late.live.current.generation).toBe(0);
      } finally {
        await late.broadcast.close();
      }
    } finally {
      await a.broadcast.close();
    }
  });

  it('numbers keep rising per topic, survive a Redis restart, and the latest is read back as published', async () => {
    const wire = createBroadcast(cfgFor('t5'));
    try {
      const first = await wire.publishRetained('topic', 'one');
      const second = await wire.publishRetained('topic', 'two words');
      expect(second).toBeGreaterThan(first);
      expect(await wire.latest('topic')).toEqual({ seq: second, message: 'two words' });
      await redis.restart(); // not persistent: the kept message is gone
      let third = 0;
      for (let i = 0; i < 40 && third === 0; i++) third = await wire.publishRetained('topic', 'three').catch(async () => (await sleep(100), 0));
      expect(third).toBeGreaterThan(second);
      expect(await wire.latest('other')).toBeNull();
    } finally {
      await wire.close();
    }
  });

  it('parseRetained takes only a positive whole number and a space', () => {
    expect(parseRetained('12 {"a":1}')).toEqual({ seq: 12, message: '{"a":1}' });
    expect(parseRetained('{"origin":"x"}')).toBeNull();
    expect(parseRetained('0 x')).toBeNull();
    expect(parseRetained('-3 x')).toBeNull();
    expect(parseRetained(' x')).toBeNull();
  });
});
