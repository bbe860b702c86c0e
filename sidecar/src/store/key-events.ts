import { EventEmitter } from 'node:events';
import { Redis } from 'ioredis';
import type { Config } from '../config/schema.js';

/**
 * "This key changed" messages between gateway instances (a revocation must
 * reach every instance's key cache). Redis pub/sub for deployments; an
 * in-process emitter for the embedded store.
 */
export interface KeyEvents {
  publish(hash: string): Promise<void>;
  subscribe(listener: (hash: string) => void): void;
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
  const options = { lazyConnect: false, maxRetriesPerRequest: 1, retryStrategy: (n: number) => Math.min(50 * 2 ** n, 1000) };
  const pub = new Redis(cfg.store.url, options);
  const sub = new Redis(cfg.store.url, options);
  pub.on('error', () => {});
  sub.on('error', () => {});
  const listeners: Array<(hash: string) => void> = [];
  sub.on('message', (_ch: string, hash: string) => listeners.forEach((l) => l(hash)));
  void sub.subscribe(channel).catch(() => {});
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
