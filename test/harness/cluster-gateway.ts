/**
 * A gateway on a Redis Cluster with one replica per master and `replicaAcks: 1`
 * (the failover and replica-loss tests), and the grant such a gateway needs
 * first: a replica of a new cluster may still be in its first sync, so the
 * (idempotent) grant is retried until one acknowledges it.
 */
import { afterAll, beforeAll } from 'vitest';
import { startGateway, type TestGateway } from './gateway.js';
import { type RedisCluster, startRedisCluster } from './redis-cluster.js';

async function startReplicatedClusterGateway(nodeTimeoutMs?: number): Promise<{ cluster: RedisCluster; gw: TestGateway }> {
  const cluster = await startRedisCluster({ replicas: 1, nodeTimeoutMs });
  try {
    const gw = await startGateway({
      config: {
        store: { kind: 'redis-cluster', nodes: cluster.urls, replicaAcks: 1 },
        billing: { creditCheck: true },
        // Answers the provider takes seconds for (in flight while a node dies) never meet the idle timeout.
        upstream: { idleTimeoutMs: 30_000 },
      },
    });
    return { cluster, gw };
  } catch (err) {
    await cluster.stop();
    throw err;
  }
}

export async function grantWhenReplicated(gw: TestGateway, amount: number, idempotencyKey: string): Promise<void> {
  for (let i = 0; ; i++) {
    try {
      await gw.admin.adjustCredits(gw.tenantId, amount, idempotencyKey, 'test');
      return;
    } catch (err) {
      if (i >= 40) throw err;
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}

/**
 * Registers the suite's hooks: such a gateway before all its tests, stopped (with its cluster) after.
 * `nodeTimeoutMs`: the cluster's node timeout (startRedisCluster).
 */
export function useReplicatedClusterGateway(opts: { nodeTimeoutMs?: number } = {}): { readonly cluster: RedisCluster; readonly gw: TestGateway } {
  const state = {} as { cluster: RedisCluster; gw: TestGateway };
  beforeAll(async () => {
    Object.assign(state, await startReplicatedClusterGateway(opts.nodeTimeoutMs));
  }, 60_000);
  afterAll(async () => {
    await state.gw?.stop();
    await state.cluster?.stop();
  });
  return state;
}
