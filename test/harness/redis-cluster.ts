/**
 * Test harness: a private Redis Cluster made of redis-server processes
 * (`cluster-enabled yes`, each on its own free port and temporary directory),
 * joined with `redis-cli --cluster create … --cluster-yes`. Three masters,
 * optionally one replica each (six processes) for failover tests. Nothing is
 * persisted; nodes bind 127.0.0.1 only. Never touches the shared Redis.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { freePort } from './ports.js';
import { type Instance, START_ATTEMPTS, exited, findRedisServer, spawnRedis, waitExit, waitReady } from './redis.js';

const run = promisify(execFile);

/** How long a silent master is tolerated before its replica takes over (ms), unless startRedisCluster is told otherwise. */
export const CLUSTER_NODE_TIMEOUT_MS = 1_000;
const FORM_TIMEOUT_MS = 30_000;

export interface RedisClusterNode {
  readonly port: number;
  readonly url: string;
}

export interface RedisCluster {
  /** Seed URLs (every node), as the `redis-cluster` store config takes them. */
  readonly urls: readonly string[];
  readonly nodes: readonly RedisClusterNode[];
  /** The port of the master currently serving `key`'s slot. */
  masterPortFor(key: string): Promise<number>;
  /** SIGKILL one node. */
  kill(port: number): Promise<void>;
  /** Starts a killed node again on its ports; it rejoins as what its cluster config says (a replica resyncs from its master). */
  restart(port: number): Promise<void>;
  /** The port of the first replica of the master serving `key`'s slot. */
  replicaPortFor(key: string): Promise<number>;
  /** Resolves once every live node reports cluster_state:ok and `key`'s slot has a live master. */
  waitHealthy(key?: string): Promise<void>;
  stop(): Promise<void>;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function redisCli(...args: string[]): Promise<string> {
  const { stdout } = await run('redis-cli', args, { timeout: FORM_TIMEOUT_MS });
  return stdout;
}

/**
 * One cluster node on a free client port and a separately chosen free bus
 * port (by default Redis takes client port + 10000, which nothing reserved and
 * another process may hold). Another process can grab either port between the
 * pick and the bind: on "in use" it tries fresh ports.
 */
async function spawnClusterNode(bin: string, dir: string, nodeTimeoutMs: number): Promise<[number, number, Instance]> {
  for (let attempt = 1; ; attempt++) {
    const [port, busPort] = await Promise.all([freePort(), freePort()]);
    if (port === busPort) continue;
    const instance = spawnNodeOn(bin, dir, port, busPort, nodeTimeoutMs);
    try {
      await waitReady(instance, port);
      return [port, busPort, instance];
    } catch (err) {
      if (attempt < START_ATTEMPTS && /in use/i.test(instance.text())) continue;
      throw err;
    }
  }
}

/** A cluster node on these ports; its nodes-<port>.conf in `dir` makes a restarted node rejoin as what it was. */
function spawnNodeOn(bin: string, dir: string, port: number, busPort: number, nodeTimeoutMs: number): Instance {
  return spawnRedis(bin, port, dir, { extraArgs: [
    '--cluster-enabled', 'yes',
    '--cluster-port', String(busPort),
    '--cluster-config-file', `nodes-${port}.conf`,
    '--cluster-node-timeout', String(nodeTimeoutMs),
    // A replica of a killed master must take over however recently it synced.
    '--cluster-replica-validity-factor', '0',
  ] });
}

/**
 * `nodeTimeoutMs`: how long a silent node is tolerated (default CLUSTER_NODE_TIMEOUT_MS); a
 * killed master's replica takes over somewhat more than this after the kill.
 */
export async function startRedisCluster(opts: { replicas?: 0 | 1; nodeTimeoutMs?: number } = {}): Promise<RedisCluster> {
  const replicas = opts.replicas ?? 0;
  const nodeTimeoutMs = opts.nodeTimeoutMs ?? CLUSTER_NODE_TIMEOUT_MS;
  const count = 3 * (1 + replicas);
  const bin = findRedisServer();
  const dir = mkdtempSync(join(tmpdir(), 'store-test-cluster-'));
  const instances = new Map<number, Instance>();
  const busPorts = new Map<number, number>();

  const stop = async (): Promise<void> => {
    await Promise.all(
      [...instances.values()].map(async (i) => {
        if (!exited(i.child)) i.child.kill('SIGKILL');
        await waitExit(i.child);
      }),
    );
    instances.clear();
    rmSync(dir, { recursive: true, force: true });
  };

  try {
    for (let n = 0; n < count; n++) {
      const [port, busPort, instance] = await spawnClusterNode(bin, dir, nodeTimeoutMs);
      instances.set(port, instance);
      busPorts.set(port, busPort);
    }
    const ports = [...instances.keys()];
    await redisCli('--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', String(replicas), '--cluster-yes');
  } catch (err) {
    await stop();
    throw err;
  }

  const nodes = [...instances.keys()].map((port) => ({ port, url: `redis://127.0.0.1:${port}` }));
  const live = (): number[] => [...instances.entries()].filter(([, i]) => !exited(i.child)).map(([p]) => p);

  async function masterPortFor(key: string): Promise<number> {
    return (await shardFor(key))[0];
  }

  /** [master port, first replica port or NaN] of `key`'s slot, as a live node reports it. */
  async function shardFor(key: string): Promise<[number, number]> {
    for (const port of live()) {
      const r = new Redis(port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
      r.on('error', () => {});
      try {
        await r.connect();
        const slot = Number(await r.call('CLUSTER', 'KEYSLOT', key));
        const shards = (await r.call('CLUSTER', 'SLOTS')) as Array<[number, number, [string, number, string]]>;
        const owner = shards.find(([from, to]) => slot >= from && slot <= to) as unknown as [number, number, [string, number, string], [string, number, string]?] | undefined;
        if (owner) return [Number(owner[2][1]), Number(owner[3]?.[1] ?? NaN)];
      } catch {
        // try the next node
      } finally {
        r.disconnect();
      }
    }
    throw new Error(`no live node knows the master for ${key}`);
  }

  async function waitHealthy(key?: string): Promise<void> {
    const deadline = Date.now() + FORM_TIMEOUT_MS;
    for (;;) {
      try {
        const states = await Promise.all(live().map((p) => redisCli('-p', String(p), 'cluster', 'info')));
        const ok = states.every((s) => s.includes('cluster_state:ok'));
        const master = key === undefined ? 0 : await masterPortFor(key);
        if (ok && (key === undefined || live().includes(master))) return;
      } catch {
        // not yet
      }
      if (Date.now() > deadline) throw new Error('Redis Cluster did not become healthy');
      await sleep(100);
    }
  }

  try {
    await waitHealthy();
  } catch (err) {
    await stop();
    throw err;
  }

  return {
    urls: nodes.map((n) => n.url),
    nodes,
    masterPortFor,
    async kill(port) {
      const instance = instances.get(port);
      if (!instance || exited(instance.child)) return;
      instance.child.kill('SIGKILL');
      await waitExit(instance.child);
    },
    async restart(port) {
      const old = instances.get(port);
      const busPort = busPorts.get(port);
      if (!old || busPort === undefined) throw new Error(`no cluster node on port ${port}`);
      if (!exited(old.child)) throw new Error(`cluster node ${port} is still running`);
      const instance = spawnNodeOn(bin, dir, port, busPort, nodeTimeoutMs);
      instances.set(port, instance);
      await waitReady(instance, port);
    },
    async replicaPortFor(key) {
      const replica = (await shardFor(key))[1];
      if (!Number.isFinite(replica)) throw new Error(`${key}'s slot has no replica`);
      return replica;
    },
    waitHealthy,
    stop,
  };
}
