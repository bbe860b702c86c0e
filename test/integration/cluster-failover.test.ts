/**
 * The gateway on a Redis Cluster with one replica per master (six
 * redis-server processes), through real Envoy: the master holding the
 * tenant's money is killed mid-load. Requests during the gap are refused with
 * 503 credits_unavailable (never answered for free); the answers already on
 * their way are settled by the journal once the replica took over; the
 * gateway serves again; the books reconcile to the micro-unit.
 */
import { describe, expect, it } from 'vitest';
import { grantWhenReplicated, useReplicatedClusterGateway } from '../harness/cluster-gateway.js';
import { books, reconciles, untilNothingHeld } from '../harness/money.js';
import { expectEnvelope, post } from '../harness/http.js';
import { until } from '../harness/until.js';

// The gap between the kill and the replica's promotion is a little more than the cluster's node
// timeout: 5 s, so the checks made right after the kill fall inside it even on a stalled box.
const env = useReplicatedClusterGateway({ nodeTimeoutMs: 5_000 });

const chat = (content: string) => ({ model: 'svc-quick', max_tokens: 50, messages: [{ role: 'user', content }] });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const readyz = async () => (await fetch(`${env.gw.stack.adminUrl}/readyz`)).status;
/** The public health path: Envoy asks the sidecar's /readyz (what a load balancer sees). */
const healthz = async () => (await fetch(`${new URL(env.gw.base).origin}/healthz`)).status;
const providerCalls = async () => (await env.gw.sim('/_sim/stats')).requestsByPath['/v1/chat/completions'] ?? 0;

describe('Redis Cluster failover', () => {
  it('a master killed mid-load: 503 credits_unavailable in the gap, no settlement lost, serves again after the promotion', async () => {
    const GRANT = 100_000_000;
    await grantWhenReplicated(env.gw, GRANT, 'grant-failover');
    const warm = await post(`${env.gw.base}/chat/completions`, chat('warm'), env.gw.key); // the key is cached now
    expect(warm.status).toBe(200);
    await untilNothingHeld(env.gw.admin, env.gw.tenantId, 10_000);
    const before = await providerCalls();

    // Answers on their way when the master dies: their settlements meet the failover.
    const inFlight = Array.from({ length: 6 }, () => post(`${env.gw.base}/chat/completions`, chat('slow #sim:delay=1500 #sim:tokens=3'), env.gw.key));
    await until('the six answers at the provider', async () => (await providerCalls()) >= before + 6, 10_000);

    const master = await env.cluster.masterPortFor(`svc:acct:{${env.gw.tenantId}}`);
    await env.cluster.kill(master);
    const killedAt = Date.now();

    // Readiness right after the kill, then steady traffic through the gap until the replica serves.
    const readyAfterKill = await readyz();
    const healthAfterKill = await healthz();
    const during: Array<Awaited<ReturnType<typeof post>>> = [];
    let servedAgain = false;
    while (!servedAgain && Date.now() - killedAt < 30_000) {
      const batch = await Promise.all(Array.from({ length: 3 }, () => post(`${env.gw.base}/chat/completions`, chat('during'), env.gw.key)));
      during.push(...batch);
      servedAgain = Date.now() - killedAt > 2_000 && batch.every((r) => r.status === 200);
      await sleep(100);
    }
    const completed = await Promise.all(inFlight);

    expect(servedAgain).toBe(true);
    // The dead master's slots had no master: not ready (a ping to one node would have said ready).
    expect(readyAfterKill).toBe(503);
    expect(healthAfterKill).toBe(503);
    let ready = await readyz();
    for (const end = Date.now() + 15_000; ready !== 200 && Date.now() < end; ready = await readyz()) await sleep(200);
    expect(ready).toBe(200); // the promoted replica is every slot's master again
    expect(await healthz()).toBe(200);
    const refused = during.filter((r) => r.status !== 200);
    expect(refused.length).toBeGreaterThan(0); // the gap was seen…
    for (const r of refused) expectEnvelope(r, 503, 'credits_unavailable'); // …and only ever as credits_unavailable
    for (const r of completed) expect(r.status).toBe(200);

    // Nothing reached the provider without a hold, and every answer is settled.
    const answered = [...completed, ...during].filter((r) => r.status === 200);
    expect((await providerCalls()) - before).toBe(answered.length);
    // The journal retries until every settlement is applied.
    let b = await untilNothingHeld(env.gw.admin, env.gw.tenantId, 30_000);
    const missing = () => answered.filter((r) => !b.usageIds.has(r.json.id)).length;
    for (const end = Date.now() + 30_000; missing() > 0 && Date.now() < end; ) {
      await sleep(250);
      b = await books(env.gw.admin, env.gw.tenantId);
    }
    const failures = () => env.gw.stack.process('sidecar').lines.filter((l) => l.includes('ledger write failed')).slice(-10).join('\n');
    expect(missing(), `${missing()} of ${answered.length} answers unsettled; the sidecar said:\n${failures()}`).toBe(0);
    const check = reconciles(b, 0);
    expect(check.ok, check.detail).toBe(true);
    expect(b.usage.filter((u) => answered.some((r) => r.json.id === u.requestId))).toHaveLength(answered.length);

  }, 90_000);
});
