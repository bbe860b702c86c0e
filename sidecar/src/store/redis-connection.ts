import type { Socket } from 'node:net';
import { Cluster, Redis, ReplyError } from 'ioredis';
import { StoreUnavailableError } from './contract.js';
import type { RedisClientOptions } from './redis-client-options.js';
import { CommandDeadlines } from './command-deadlines.js';

/**
 * An ioredis connection with the store's failure policy (the key store and
 * the ledger each open one): no offline queue (fail fast), no automatic resend of
 * unanswered commands, a per-command timeout (kept by connectRedis itself, not
 * by ioredis: command-deadlines.ts), reconnect forever with a short
 * backoff; every failure to use Redis becomes StoreUnavailableError.
 */
export const DEFAULT_CONNECT_TIMEOUT_MS = 2_000;
export const DEFAULT_COMMAND_TIMEOUT_MS = 1_000;
const RECONNECT_BASE_MS = 50;
const RECONNECT_MAX_MS = 1_000;

/** Server replies meaning "Redis cannot serve this right now". */
const UNAVAILABLE_REPLIES = new Set([
  'LOADING',
  'BUSY',
  'READONLY',
  'MASTERDOWN',
  'CLUSTERDOWN',
  'TRYAGAIN',
  // A Cluster slot served elsewhere (a failover or a resharding): the command did not
  // run. The client follows these itself for single commands; a pipeline (a settlement
  // followed by WAIT) surfaces them.
  'MOVED',
  'ASK',
  'MISCONF',
  'OOM',
  'NOREPLICAS',
  'NOAUTH',
  'WRONGPASS',
]);

export function positive(value: number | undefined, fallback: number, what: string): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value <= 0) throw new TypeError(`${what} must be a positive number`);
  return value;
}

/** Maps an error from ioredis to what the contract promises. */
export function toStoreError(err: unknown): unknown {
  if (err instanceof StoreUnavailableError) return err;
  if (err instanceof ReplyError) {
    const code = String((err as Error).message).split(' ', 1)[0] ?? '';
    return UNAVAILABLE_REPLIES.has(code) ? new StoreUnavailableError(err) : err;
  }
  // Connection refused/reset/closed, "Stream isn't writeable…", "Command timed
  // out", MaxRetriesPerRequestError, "Connection is closed.", parser errors.
  return new StoreUnavailableError(err);
}


/**
 * Where the store lives: one Redis (a redis:// or rediss:// URL) or a Redis
 * Cluster (seed node URLs; the client discovers the rest and follows
 * MOVED/ASK redirections and failovers).
 */
export type RedisTarget = { readonly url: string; readonly clusterNodes?: undefined } | { readonly clusterNodes: readonly string[]; readonly url?: undefined };

/** The client for a target: a single-node connection or ioredis's Cluster client. */
export type RedisClient = Redis | Cluster;

const reconnectDelay = (times: number): number => Math.min(RECONNECT_BASE_MS * 2 ** Math.min(Math.max(times, 1) - 1, 10), RECONNECT_MAX_MS);

/**
 * A new client for the target. `failFast`: the store's policy (no offline
 * queue, at most one retry, no resend after a reconnect); without it (the
 * pub/sub subscriber) commands wait for the connection. `commandTimeoutMs`:
 * ioredis's own timer per command (connectRedis keeps the timeout itself).
 */
export function newRedisClient(
  target: RedisTarget,
  opts: { connectTimeoutMs: number; commandTimeoutMs?: number; failFast: boolean; client?: RedisClientOptions | undefined },
): RedisClient {
  const nodeOptions = {
    ...opts.client,
    connectTimeout: opts.connectTimeoutMs,
    ...(opts.commandTimeoutMs !== undefined ? { commandTimeout: opts.commandTimeoutMs } : {}),
    maxRetriesPerRequest: opts.failFast ? 1 : null,
    autoResendUnfulfilledCommands: !opts.failFast,
  };
  if (target.clusterNodes === undefined) {
    return new Redis(target.url, { ...nodeOptions, enableOfflineQueue: !opts.failFast, lazyConnect: false, retryStrategy: reconnectDelay });
  }
  const seeds = target.clusterNodes.map((url) => {
    const u = new URL(url);
    return { host: u.hostname, port: Number(u.port || 6379) };
  });
  const first = new URL(target.clusterNodes[0] ?? 'redis://127.0.0.1:6379');
  return new Cluster(seeds, {
    enableOfflineQueue: !opts.failFast,
    clusterRetryStrategy: reconnectDelay,
    // A failover shows up as refused connections, CLUSTERDOWN and MOVED; one short retry
    // each, then the command fails (fail closed) and the caller's own retry (the
    // settlement journal) takes over.
    retryDelayOnFailover: RECONNECT_BASE_MS,
    retryDelayOnClusterDown: RECONNECT_BASE_MS,
    retryDelayOnTryAgain: RECONNECT_BASE_MS,
    maxRedirections: 4,
    slotsRefreshTimeout: opts.connectTimeoutMs,
    redisOptions: {
      // Credentials in the first seed's URL, unless the store's client options (ACL user, password, TLS) say otherwise.
      ...(first.username ? { username: decodeURIComponent(first.username) } : {}),
      ...(first.password ? { password: decodeURIComponent(first.password) } : {}),
      ...(first.protocol === 'rediss:' ? { tls: {} } : {}),
      ...nodeOptions,
    },
  });
}

const CLUSTER_SLOTS = 16_384;

/**
 * Every node that serves keys answers: the one node, or on a Cluster a reachable master
 * for every slot. A ping to the Cluster client reaches one node only, and the client
 * forgets a master the moment its connection drops, so a dead master whose slots no
 * replica has taken over yet would go unnoticed by a readiness check. Slots without a
 * known master make the client ask the Cluster for its slot map again (it learns of a
 * promoted replica then, and the next check passes).
 */
export async function pingEvery(client: RedisClient): Promise<void> {
  if (!(client instanceof Cluster)) {
    await client.ping();
    return;
  }
  const masters = client.nodes('master');
  const known = new Set(masters.map((n) => `${n.options.host}:${n.options.port}`));
  let uncovered = 0;
  for (let slot = 0; slot < CLUSTER_SLOTS; slot++) {
    if (!known.has(client.slots[slot]?.[0] ?? '')) uncovered++;
  }
  if (uncovered > 0) {
    client.refreshSlotsCache(() => {}); // its failure is the next check's
    throw new StoreUnavailableError(new Error(`${uncovered} Cluster slots have no reachable master`));
  }
  await Promise.all(masters.map((node) => node.ping()));
}

/**
 * A Cluster client learns a promoted replica from MOVED answers or a fresh slot map; a
 * client whose commands only ever fail (its master gone) asks for the map again here.
 * ioredis runs one refresh at a time; a single node has nothing to refresh.
 */
export function refreshRouting(client: RedisClient): void {
  if (client instanceof Cluster) client.refreshSlotsCache(() => {});
}

export interface RedisConnection {
  readonly client: RedisClient;
  /** Runs Redis commands, mapping client/connection failures to contract errors. */
  redis<T>(op: () => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

export function connectRedis(
  target: RedisTarget,
  opts: { connectTimeoutMs: number; commandTimeoutMs: number; client?: RedisClientOptions | undefined },
): RedisConnection {
  // The per-command timeout is kept here, not by ioredis (command-deadlines.ts).
  const client = newRedisClient(target, { connectTimeoutMs: opts.connectTimeoutMs, failFast: true, client: opts.client });
  const deadlines = new CommandDeadlines(opts.commandTimeoutMs);
  // Connection errors are reported through the commands that fail; without a
  // listener ioredis would print "Unhandled error event" for each attempt.
  client.on('error', () => {});

  // Calls made while the first connection attempt is still in flight wait for
  // it; afterwards (and after it failed) they fail fast.
  let starting: Promise<void> | null = new Promise<void>((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      client.off('ready', done);
      client.off('error', done);
      client.off('close', done);
      starting = null;
      resolve();
    };
    const timer = setTimeout(done, opts.connectTimeoutMs);
    timer.unref();
    client.on('ready', done);
    client.on('error', done);
    client.on('close', done);
  });

  /** Runs op now (its commands are written in this turn: corked() relies on it), failing it at its deadline. */
  const run = <T>(op: () => Promise<T>): Promise<T> => {
    let sent: Promise<T>;
    try {
      sent = op();
    } catch (err) {
      return Promise.reject(toStoreError(err));
    }
    // No named closure per operation (tsx's keepNames would give each a defineProperty call).
    return new Promise<T>((resolve, reject) => {
      const slot = deadlines.watch(reject);
      sent.then(
        (value) => {
          deadlines.done(slot, reject);
          resolve(value);
        },
        (err: unknown) => {
          deadlines.done(slot, reject);
          reject(toStoreError(err));
        },
      );
    });
  };

  let closing: Promise<void> | null = null;
  return {
    client,
    redis<T>(op: () => Promise<T>): Promise<T> {
      const wait = starting;
      return wait === null ? run(op) : wait.then(() => run(op));
    },
    close() {
      closing ??= (async () => {
        try {
          await client.quit();
        } catch {
          client.disconnect();
        }
      })();
      return closing;
    },
  };
}

/**
 * Runs `run` with the sockets of these clients corked: the commands it
 * issues are buffered by Node and leave in one write per socket when it
 * returns (uncork), instead of one system call each. On a Cluster, every
 * node connection the client holds is corked. A socket not connected is
 * left alone (its commands wait in ioredis's own queue).
 */
export function corked(clients: readonly RedisClient[], run: () => void): void {
  const streams: Socket[] = [];
  for (const c of clients) {
    for (const node of c instanceof Cluster ? c.nodes('all') : [c]) {
      const stream = (node as unknown as { stream?: Socket }).stream;
      if (stream?.writable) {
        stream.cork();
        streams.push(stream);
      }
    }
  }
  try {
    run();
  } finally {
    for (const s of streams) s.uncork();
  }
}
