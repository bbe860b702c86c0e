import { EventEmitter } from 'node:events';
import { Redis } from 'ioredis';
import type { Config } from '../config/schema.js';
import { redisClientOptions } from './redis-client-options.js';

/**
 * "This key changed" messages between gateway instances (a revocation must
 * reach every instance's key cache). Redis pub/sub for deployments; an
 * in-process emitter for the embedded store.
 */
export interface KeyEvents {
  publish(hash: string): Promise<void>;
  /**
   * `hash`: that key changed. `null`: the subscription was (re)established, so
   * messages may have been missed meanwhile: forget every cached key.
   */
  subscribe(listener: (hash: string | null) => void): void;
  close(): Promise<void>;
}

export function createKeyEvents(cfg: Config): KeyEvents {
  if (cfg.store.kind === 'memory') {
    const bus = new EventEmitter();
    return {
      async publish(hash) {
        bus.emit('changed', hash);
      },
      subscribe(listener) {
        bus.on('changed', listener);
      },
      async close() {
        bus.removeAllListeners();
      },
    };
  }
  const channel = `${cfg.brand}:keys:changed`;
  const retryStrategy = (n: number) => Math.min(50 * 2 ** n, 1000);
  const client = redisClientOptions(cfg.store);
  const pub = new Redis(cfg.store.url, { ...client, maxRetriesPerRequest: 1, retryStrategy });
  // The subscriber waits for Redis however long it takes (no per-command retry limit)
  // and subscribes again on every (re)connection: a SUBSCRIBE lost while Redis was
  // unreachable at start would otherwise leave this instance deaf to revocations.
  const sub = new Redis(cfg.store.url, { ...client, maxRetriesPerRequest: null, retryStrategy });
  pub.on('error', () => {});
  sub.on('error', () => {});
  const listeners: Array<(hash: string | null) => void> = [];
  const notify = (hash: string | null) => listeners.forEach((l) => l(hash));
  sub.on('message', (_ch: string, hash: string) => notify(hash));
  sub.on('ready', () => {
    sub.subscribe(channel).then(() => notify(null), () => {});
  });
  return {
    async publish(hash) {
      await pub.publish(channel, hash);
    },
    subscribe(listener) {
      listeners.push(listener);
    },
    async close() {
      pub.disconnect();
      sub.disconnect();
    },
  };
}
