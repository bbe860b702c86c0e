import { createServer } from 'node:net';
import { Redis } from 'ioredis';
import type { Config } from '../src/config/schema.js';
import type { RedisClientOptions } from '../src/store/redis-client-options.js';

/**
 * Checks made before the local stack starts anything, so that a start that
 * cannot succeed fails at once, saying what is wrong and where, with nothing
 * left running.
 */

export interface Listener {
  /** What listens there, with the setting or variable that moves it. */
  readonly what: string;
  readonly host: string;
  readonly port: number;
}

/** The TCP ports the stack is about to bind (port 0: any free port, nothing to check). */
export function listenersOf(cfg: Config, simulator: boolean): Listener[] {
  const out: Listener[] = [
    { what: 'Envoy gateway listener (listen.gateway, GATEWAY_PORT)', ...cfg.listen.gateway },
    { what: 'Envoy admin (listen.envoyAdmin, ENVOY_ADMIN_PORT)', ...cfg.listen.envoyAdmin },
    { what: 'sidecar operator API (listen.admin, ADMIN_PORT)', ...cfg.listen.admin },
  ];
  const account = new URL(cfg.accountService.url);
  out.push({ what: 'account service (accountService.url, ACCOUNT_SERVICE_URL)', host: account.hostname, port: Number(account.port || 80) });
  if (simulator) {
    const up = new URL(cfg.upstream.baseUrl);
    out.push({ what: 'bundled simulator (upstream.baseUrl, UPSTREAM_URL)', host: up.hostname, port: Number(up.port || (up.protocol === 'https:' ? 443 : 80)) });
  }
  if (!cfg.listen.sidecarGrpc.startsWith('unix:')) {
    const i = cfg.listen.sidecarGrpc.lastIndexOf(':');
    out.push({ what: 'sidecar gRPC (listen.sidecarGrpc, SIDECAR_GRPC)', host: cfg.listen.sidecarGrpc.slice(0, i), port: Number(cfg.listen.sidecarGrpc.slice(i + 1)) });
  }
  return out.filter((l) => l.port !== 0);
}

function portInUse(l: Listener): Promise<string | null> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    server.listen({ host: l.host.replace(/^\[|\]$/g, ''), port: l.port, exclusive: true }, () => server.close(() => resolve(null)));
  });
}

/** Throws one error naming every listener whose address cannot be bound (in use, or not a local address). */
export async function assertPortsFree(listeners: readonly Listener[]): Promise<void> {
  const problems: string[] = [];
  for (const l of listeners) {
    const code = await portInUse(l);
    if (code === 'EADDRINUSE') problems.push(`port ${l.port} on ${l.host} is already in use: ${l.what}`);
    else if (code) problems.push(`cannot listen on ${l.host}:${l.port} (${code}): ${l.what}`);
  }
  if (problems.length) {
    throw new Error(`${problems.join('\n')}\n(another gateway still running? stop it, or move the port with the setting or variable named)`);
  }
}

/** A Redis URL fit for a message: the password, if any, replaced. */
export function redactRedisUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable Redis URL)';
  }
}

/**
 * Resolves when Redis at `url` answers PING, connecting as the sidecar will
 * (`options`: its ACL user, password and TLS); throws an error naming the URL and what happened.
 */
export async function assertRedisReachable(url: string, options: RedisClientOptions = {}, timeoutMs = 3000): Promise<void> {
  const client = new Redis(url, { ...options, lazyConnect: true, connectTimeout: timeoutMs, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false });
  let cause: NodeJS.ErrnoException | null = null;
  client.on('error', (err: NodeJS.ErrnoException) => (cause ??= err)); // the socket's own error says more than "Connection is closed"
  try {
    await client.connect();
    await client.ping();
  } catch (err) {
    const e = cause ?? (err as NodeJS.ErrnoException);
    throw new Error(
      `Redis at ${redactRedisUrl(url)} did not answer (${e.code ?? e.message}). ` +
        'Start redis-server there, point REDIS_URL (or store.url) at a running Redis, or unset REDIS_URL to use the in-memory store.',
    );
  } finally {
    client.disconnect();
  }
}
