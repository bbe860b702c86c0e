import { EventEmitter } from 'node:events';
import type { Config } from '../config/schema.js';
import { redisClientOptions } from './redis-client-options.js';
import { DEFAULT_COMMAND_TIMEOUT_MS, DEFAULT_CONNECT_TIMEOUT_MS, newRedisClient } from './redis-connection.js';
import { storeTarget } from './target.js';

/**
 * Messages between gateway instances on named topics: "this key changed" (a
 * revocation must reach every instance's key cache) and "the configuration
 * was reloaded" (an alias move reaches every instance). Redis pub/sub for
 * deployments (one publishing and one subscribing connection for all
 * topics); an in-process emitter for the embedded store.
 */
export interface Broadcast {
  publish(topic: string, message: string): Promise<void>;
  /**
   * `message`: one published on this topic. `null`: the subscription was
   * (re)established, so messages may have been missed meanwhile.
   */
  subscribe(topic: string, listener: (message: string | null) => void): void;
  /**
   * Publishes and keeps the message as the topic's latest, numbered: a later
   * publication on the topic has a larger number (Redis's clock, so a restart
   * of Redis keeps the order). Subscribers receive it as `<seq> <message>`
   * (parseRetained); one that missed it reads it with latest().
   */
  publishRetained(topic: string, message: string): Promise<number>;
  /** The topic's latest retained message, or null when there is none (or Redis lost it). */
  latest(topic: string): Promise<Retained | null>;
  close(): Promise<void>;
}

export interface Retained {
  readonly seq: number;
  readonly message: string;
}

/** A retained message as subscribers receive it; null for anything else. */
export function parseRetained(raw: string): Retained | null {
  const space = raw.indexOf(' ');
  if (space <= 0) return null;
  const seq = Number(raw.slice(0, space));
  return Number.isSafeInteger(seq) && seq > 0 ? { seq, message: raw.slice(space + 1) } : null;
}

/**
 * Numbers the message with Redis's clock in microseconds (strictly above the
 * topic's previous number), keeps it as the latest and publishes it, in one
 * step. Both keys share a hash tag, so this runs on one Cluster node too.
 */
const PUBLISH_RETAINED = `
local t = redis.call('TIME')
local seq = tonumber(t[1]) * 1000000 + tonumber(t[2])
local prev = tonumber(redis.call('GET', KEYS[1]) or '0')
if seq <= prev then seq = prev + 1 end
local framed = string.format('%d', seq) .. ' ' .. ARGV[1]
redis.call('SET', KEYS[1], string.format('%d', seq))
redis.call('SET', KEYS[2], framed)
redis.call('PUBLISH', ARGV[2], framed)
return framed
`;

export interface KeyEvents {
  publish(hash: string): Promise<void>;
  /**
   * `hash`: that key changed. `null`: the subscription was (re)established, so
   * messages may have been missed meanwhile: forget every cached key.
   */
  subscribe(listener: (hash: string | null) => void): void;
  close(): Promise<void>;
}

const KEYS_TOPIC = 'keys:changed';

export function createBroadcast(cfg: Config): Broadcast {
  if (cfg.store.kind === 'memory') {
    const bus = new EventEmitter();
    const retained = new Map<string, Retained>();
    return {
      async publish(topic, message) {
        bus.emit(topic, message);
      },
      async publishRetained(topic, message) {
        const seq = (retained.get(topic)?.seq ?? 0) + 1;
        retained.set(topic, { seq, message });
        bus.emit(topic, `${seq} ${message}`);
        return seq;
      },
      async latest(topic) {
        return retained.get(topic) ?? null;
      },
      subscribe(topic, listener) {
        bus.on(topic, listener);
      },
      async close() {
        bus.removeAllListeners();
      },
    };
  }
  const channel = (topic: string) => `${cfg.brand}:${topic}`;
  const retainedKey = (topic: string, part: 'seq' | 'latest') => `${cfg.brand}:retained:{${topic}}:${part}`;
  const target = storeTarget(cfg.store);
  const connectTimeoutMs = DEFAULT_CONNECT_TIMEOUT_MS;
  const client = redisClientOptions(cfg.store);
  const pub = newRedisClient(target, { connectTimeoutMs, commandTimeoutMs: DEFAULT_COMMAND_TIMEOUT_MS, failFast: false, client });
  // The subscriber waits for Redis however long it takes (no per-command retry limit)
  // and subscribes again on every (re)connection: a SUBSCRIBE lost while Redis was
  // unreachable at start would otherwise leave this instance deaf to revocations.
  // On a Cluster, PUBLISH reaches every node and the client keeps one subscriber
  // connection, moving it to another node when its node fails. A message published
  // while it moves can be missed: auth.keyCacheSeconds bounds that, as for any lost
  // message. (Flushing the key cache on every node loss would send every key lookup
  // to Redis during a failover, refusing keys whose slot is on the dead master.)
  const sub = newRedisClient(target, { connectTimeoutMs, failFast: false, client });
  pub.on('error', () => {});
  sub.on('error', () => {});
  const listeners = new Map<string, Array<(message: string | null) => void>>();
  sub.on('message', (ch: string, message: string) => listeners.get(ch)?.forEach((l) => l(message)));
  const subscribeAll = () => {
    for (const [ch, ls] of listeners) sub.subscribe(ch).then(() => ls.forEach((l) => l(null)), () => {});
  };
  sub.on('ready', subscribeAll);
  return {
    async publish(topic, message) {
      await pub.publish(channel(topic), message);
    },
    async publishRetained(topic, message) {
      const framed = (await pub.eval(PUBLISH_RETAINED, 2, retainedKey(topic, 'seq'), retainedKey(topic, 'latest'), message, channel(topic))) as string;
      return parseRetained(framed)?.seq ?? 0;
    },
    async latest(topic) {
      const raw = await pub.get(retainedKey(topic, 'latest'));
      return raw === null ? null : parseRetained(raw);
    },
    subscribe(topic, listener) {
      const ch = channel(topic);
      const ls = listeners.get(ch);
      if (ls) ls.push(listener);
      else {
        listeners.set(ch, [listener]);
        if (sub.status === 'ready') sub.subscribe(ch).then(() => listener(null), () => {});
      }
    },
    async close() {
      pub.disconnect();
      sub.disconnect();
    },
  };
}

/** Key changes over a broadcast (its own, unless one is given to share). */
export function createKeyEvents(cfg: Config, broadcast: Broadcast = createBroadcast(cfg)): KeyEvents {
  return {
    publish: (hash) => broadcast.publish(KEYS_TOPIC, hash),
    subscribe: (listener) => broadcast.subscribe(KEYS_TOPIC, listener),
    close: () => broadcast.close(),
  };
}
