// How many requests' money one Redis carries: `npx tsx test/bench/ledger-throughput.ts`
// (LEDGER_SECONDS per path, LEDGER_WORKERS, LEDGER_TENANTS tune it). A private
// redis-server (AOF on, fsync everysec, as deployed); workers run the money
// path of one request each time, in two ways, one after the other:
//
//   lease  the gateway's default (billing.creditLease, while no rate limit is set): the request is admitted
//          inside the instance's credit lease with no Redis call, and its one
//          settlement script takes its commitment out of the lease (and appends
//          the usage record and the ledger entry);
//   hold   without a lease: a hold per request (reserve script), then the
//          settlement script.
//
// Prints requests per second and Redis's own CPU per request (INFO cpu), which
// bounds how many gateway instances one Redis serves.
import { Redis } from 'ioredis';
import { startRedis } from '../harness/redis.js';
import { createRedisLedger } from '../../sidecar/src/store/redis-ledger.js';
import type { LeaseCommitment } from '../../sidecar/src/store/ledger-contract.js';

const SECONDS = Number(process.env.LEDGER_SECONDS ?? 5);
const WORKERS = Number(process.env.LEDGER_WORKERS ?? 64);
const TENANTS = Number(process.env.LEDGER_TENANTS ?? 100);
/** What one request commits inside a lease (micro-units; the bench's chats commit about this). */
const COMMITMENT = 5000;

const redis = await startRedis();
const admin = new Redis(redis.url);
await admin.config('SET', 'appendonly', 'yes');
await admin.config('SET', 'appendfsync', 'everysec');
const ledger = createRedisLedger({ url: redis.url, prefix: 'bench' });
const cpu = async () => {
  const info = await admin.info('cpu');
  const v = (k: string) => Number(new RegExp(`${k}:([0-9.]+)`).exec(info)?.[1] ?? NaN);
  return v('used_cpu_sys') + v('used_cpu_user');
};
const periodOf = (now: number) => new Date(now).toISOString().slice(0, 7);

/** Runs `one` from WORKERS workers for SECONDS; prints requests per second and Redis's CPU per request. */
async function measure(label: string, one: (tenantId: string, requestId: string, now: number) => Promise<void>): Promise<void> {
  let done = 0;
  let seq = 0;
  const until = Date.now() + SECONDS * 1000;
  const cpu0 = await cpu();
  const t0 = Date.now();
  await Promise.all(
    Array.from({ length: WORKERS }, async () => {
      while (Date.now() < until) {
        const n = seq++;
        await one(tenants[n % TENANTS] as string, `req-${label}-${n}`, Date.now());
        done++;
      }
    }),
  );
  const secs = (Date.now() - t0) / 1000;
  const redisCpu = (await cpu()) - cpu0;
  process.stdout.write(`${label}: ${(done / secs).toFixed(0)} requests/s with ${WORKERS} in flight over ${TENANTS} tenants; `);
  process.stdout.write(`Redis CPU ${((redisCpu / done) * 1e6).toFixed(1)} µs per request (${(redisCpu / secs).toFixed(2)} cores)\n`);
}

function settle(tenantId: string, requestId: string, now: number, lease?: LeaseCommitment): Promise<unknown> {
  const time = new Date(now).toISOString();
  return ledger.settle({
    tenantId, requestId, charge: 1200, creditCheck: true, period: periodOf(now), day: time.slice(0, 10), now, ...(lease ? { lease } : {}),
    usage: { time, tenantId, keyId: 'key_b', alias: 'svc-quick', internalModel: 'm', promptTokens: 10, completionTokens: 20, totalTokens: 30, requestCount: 1, requestId, estimated: false },
  });
}

const tenants = Array.from({ length: TENANTS }, (_, i) => `ten_bench${i}`);
try {
  for (const t of tenants) await ledger.adjustBalance(t, 1e12, `grant-${t}`, 'bench', Date.now());
  // One lease per tenant, large enough for every request of the run.
  const leases = new Map<string, string>();
  for (const t of tenants) {
    const id = `lease-${t}`;
    const r = await ledger.extendLease({ tenantId: t, leaseId: id, amount: 1e11, minimum: 1, headroom: 1, creditCheck: true, period: periodOf(Date.now()), holdTtlSeconds: 3600, leaseSeconds: 3600, owner: 'bench', now: Date.now() });
    if (r.granted === 0) throw new Error(`no lease granted for ${t}`);
    leases.set(t, id);
  }
  await measure('lease (one settlement)', async (tenantId, requestId, now) => {
    await settle(tenantId, requestId, now, { id: leases.get(tenantId) as string, amount: COMMITMENT });
  });
  await measure('hold + settlement', async (tenantId, requestId, now) => {
    await ledger.reserve({ tenantId, requestId, keyId: 'key_b', amount: COMMITMENT, tokens: 100, creditCheck: true, period: periodOf(now), minute: Math.floor(now / 60000), limits: null, holdTtlSeconds: 3600, now });
    await settle(tenantId, requestId, now);
  });
  const mem = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))?.[1]);
  const kept = Number(/keys=(\d+)/.exec(await admin.info('keyspace'))?.[1]);
  process.stdout.write(`Redis memory after both: ${(mem / 1e6).toFixed(1)} MB over ${kept} keys (per request: a settled hold kept 7 days, a usage record, a ledger entry)\n`);
} finally {
  await ledger.close();
  admin.disconnect();
  await redis.stop();
}
