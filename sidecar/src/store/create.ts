import type { Config } from '../config/schema.js';
import type { Store } from './contract.js';
import type { Ledger } from './ledger-contract.js';
import { createMemoryLedger } from './memory-ledger.js';
import { createMemoryStore } from './memory.js';
import { createRedisLedger } from './redis-ledger.js';
import { retentionFromDays } from './retention.js';
import { createRedisStore } from './redis.js';
import { redisClientOptions } from './redis-client-options.js';
import type { AccountStore } from './account-contract.js';
import { createMemoryAccountStore } from './memory-accounts.js';
import { createRedisAccountStore } from './redis-accounts.js';
import { storeTarget } from './target.js';

/** The store and ledger the configuration asks for. */
export function createStore(cfg: Config): Store {
  return cfg.store.kind === 'memory'
    ? createMemoryStore()
    : createRedisStore({ ...storeTarget(cfg.store), prefix: cfg.brand, client: redisClientOptions(cfg.store) });
}

export function createLedger(cfg: Config): Ledger {
  return cfg.store.kind === 'memory'
    ? createMemoryLedger({ retention: retentionFromDays(cfg.retention) })
    : createRedisLedger({
        ...storeTarget(cfg.store),
        prefix: cfg.brand,
        client: redisClientOptions(cfg.store),
        retention: retentionFromDays(cfg.retention),
        ...(cfg.store.kind === 'redis-cluster' ? { replicaAcks: cfg.store.replicaAcks } : {}),
      });
}

export function createAccountStore(cfg: Config): AccountStore {
  return cfg.store.kind === 'memory'
    ? createMemoryAccountStore()
    : createRedisAccountStore({ ...storeTarget(cfg.store), prefix: cfg.brand, client: redisClientOptions(cfg.store) });
}
