import type { RedisOptions } from 'ioredis';
import { nodeTlsOptions } from '../adapters/outbound-tls.js';
import { readSecret } from '../config/load.js';
import type { Config } from '../config/schema.js';

type RedisStoreConfig = Exclude<Config['store'], { kind: 'memory' }>;

/** What every Redis connection of the sidecar adds to its URL: ACL user, password, TLS. */
export type RedisClientOptions = Pick<RedisOptions, 'username' | 'password' | 'tls'>;

/**
 * The ACL user and password (from `passwordFile`, else the variable named by
 * `passwordEnv`: never from a command line) and, for `rediss://`, TLS that
 * verifies the server (store.tls). Read once at start; an unreadable file is
 * an error naming the setting.
 */
export function redisClientOptions(store: RedisStoreConfig, env: Readonly<Record<string, string | undefined>> = process.env): RedisClientOptions {
  const out: RedisClientOptions = {};
  if (store.username) out.username = store.username;
  const password = readSecret({ file: store.passwordFile, env: store.passwordEnv }, env, 'store.passwordFile');
  if (password !== undefined) out.password = password;
  // A Cluster's nodes share one TLS setting, verified against the first seed's host name.
  const url = new URL(store.kind === 'redis' ? store.url : (store.nodes[0] as string));
  if (url.protocol === 'rediss:') out.tls = nodeTlsOptions(store.tls, url.hostname, 'store.tls');
  return out;
}
