import type { Config } from '../config/schema.js';
import type { Store } from './contract.js';
import { createMemoryStore } from './memory.js';
import { createRedisStore } from './redis.js';

/** The store the configuration asks for. */
export function createStore(cfg: Config): Store {
  return cfg.store.kind === 'redis' ? createRedisStore({ url: cfg.store.url, prefix: cfg.brand }) : createMemoryStore();
}
