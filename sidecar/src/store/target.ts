import type { Config } from '../config/schema.js';
import type { RedisTarget } from './redis-connection.js';

/** The Redis a `redis` or `redis-cluster` store config points at. */
export function storeTarget(store: Exclude<Config['store'], { kind: 'memory' }>): RedisTarget {
  return store.kind === 'redis' ? { url: store.url } : { clusterNodes: store.nodes };
}
