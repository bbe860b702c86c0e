/**
 * The gateway on a Redis Cluster with one replica per master and
 * `replicaAcks: 1`, through real Envoy: the replica of the master holding the
 * tenant's money is killed. No settlement can be replicated while it is gone
 * (every WAIT runs out), so each is kept in the settlement journal; the
 * requests are served as before all the same (admissions no longer queue
 * behind the settlements' WAITs on a shared connection, which answered most of
 * them 503 after a second). Once the replica is back and synced, the journal
 * drains and the books reconcile to the micro-unit.
 */
import { describe, expect, it } from 'vitest';
import { grantWhenReplicated, useReplicatedClusterGateway } from '../harness/cluster-gateway.js';
import { books, reconciles, untilNothingHeld } from '../harness/money.js';
import { post } from '../harness/http.js';
import { until } from '../harness/until.js';

const env = useReplicatedClusterGateway();

const chat = (content: string) => ({ model: 'svc-quick', max_tokens: 50, messages: [{ role: 'user', content }] });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const journalPending = async (): Promise<number> => {
  const text = await (await fetch(`${env.gw.stack.adminUrl}/metrics`, { headers: { authorization: `Bearer ${env.gw.stack.adminToken}` } })).text();
  return Number(/^gateway_settlement_journal_pending (\S+)$/m.exec(text)?.[1] ?? NaN);
};

describe('Redis Cluster: a replica lost with replicaAcks 1', () => {
  it('keeps serving, journals the settlements it cannot replicate, and settles them once the replica is back', async () => {
    await grantWhenReplicated(env.gw, 100_000_000, 'grant-replica-loss');
    const warm = await post(`${env.gw.base}/chat/completions`, chat('warm'), env.gw.key);
    expect(warm.status).toBe(200);
    await untilNothingHeld(env.gw.admin, env.gw.tenantId, 10_000);
    expect(await journalPending()).toBe(0);

    const replica = await env.cluster.replicaPortFor(`svc:acct:{${env.gw.tenantId}}`);
    await env.cluster.kill(replica);

    // Sequential chats in bursts a second apart, as a client sends them (past the credit lease's
    // 500 ms of grace, so admissions need Redis again): each answered 200. An admission queued behind
    // a settlement's WAIT would run into the 1 s command timeout and be refused 503 (fails closed), so
    // the statuses show none waited on the lost replica (no timed assertion).
    const answered: Array<Awaited<ReturnType<typeof post>>> = [];
    for (let burst = 0; burst < 4; burst++) {
      await sleep(1000);
      for (let i = 0; i < 8; i++) answered.push(await post(`${env.gw.base}/chat/completions`, chat(`during ${burst}.${i}`), env.gw.key));
    }
    expect(answered.map((r) => r.status)).toEqual(answered.map(() => 200));

    // Not replicated: kept in the journal (the money is written on the master; only the acknowledgement is missing).
    await until('settlements journaled', async () => (await journalPending()) > 0, 10_000);

    await env.cluster.restart(replica);
    await until('the journal drained after the replica came back', async () => (await journalPending()) === 0, 60_000);

    const b = await untilNothingHeld(env.gw.admin, env.gw.tenantId, 30_000);
    for (const r of [warm, ...answered]) expect(b.usageIds.has(r.json.id as string), `usage record of ${r.json.id}`).toBe(true);
    const check = reconciles(b, 0);
    expect(check.ok, check.detail).toBe(true);
    // Every answer booked exactly once, the ones whose settlements were journaled and retried included.
    const again = await books(env.gw.admin, env.gw.tenantId);
    const ids = [warm, ...answered].map((r) => r.json.id as string);
    expect(again.usage.filter((u) => ids.includes(u.requestId)).map((u) => u.requestId).sort()).toEqual([...ids].sort());
  }, 120_000);
});
