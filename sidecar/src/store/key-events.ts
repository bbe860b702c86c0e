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
  close(): Promise<void>;
}

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
    return {
      async publish(topic, message) {
        bus.emit(topic, message);
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
