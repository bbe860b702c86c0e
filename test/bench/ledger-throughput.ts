// How many requests' money one Redis carries: `npx tsx test/bench/ledger-throughput.ts`
// (LEDGER_SECONDS, LEDGER_WORKERS, LEDGER_TENANTS tune it). A private
// redis-server (AOF on, fsync everysec, as deployed); workers run the money
// path of one request each time: the hold (reserve script) then the settlement
// (settle script, which also appends the usage record and the ledger entry).
// Prints requests per second and Redis's own CPU per request (INFO cpu), which
// bounds how many gateway instances one Redis serves.
import { Redis } from 'ioredis';
import { startRedis } from '../harness/redis.js';
import { createRedisLedger } from '../../sidecar/src/store/redis-ledger.js';

const SECONDS = Number(process.env.LEDGER_SECONDS ?? 5);
const WORKERS = Number(process.env.LEDGER_WORKERS ?? 64);
const TENANTS = Number(process.env.LEDGER_TENANTS ?? 100);

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
try {
  const tenants = Array.from({ length: TENANTS }, (_, i) => `ten_bench${i}`);
  for (const t of tenants) await ledger.adjustBalance(t, 1e12, `grant-${t}`, 'bench', Date.now());
  let done = 0;
  let seq = 0;
  const until = Date.now() + SECONDS * 1000;
  const cpu0 = await cpu();
  const t0 = Date.now();
  await Promise.all(
    Array.from({ length: WORKERS }, async () => {
      while (Date.now() < until) {
        const tenantId = tenants[seq % TENANTS] as string;
        const requestId = `req-${seq++}`;
        const now = Date.now();
        const period = new Date(now).toISOString().slice(0, 7);
        await ledger.reserve({ tenantId, requestId, keyId: 'key_b', amount: 5000, tokens: 100, creditCheck: true, period, minute: Math.floor(now / 60000), limits: null, holdTtlSeconds: 3600, now });
        await ledger.settle({
          tenantId, requestId, charge: 1200, creditCheck: true, period, day: new Date(now).toISOString().slice(0, 10), now,
          usage: { time: new Date(now).toISOString(), tenantId, keyId: 'key_b', alias: 'svc-quick', internalModel: 'm', promptTokens: 10, completionTokens: 20, totalTokens: 30, requestCount: 1, requestId, estimated: false },
        });
        done++;
      }
    }),
  );
  const secs = (Date.now() - t0) / 1000;
  const redisCpu = (await cpu()) - cpu0;
  const mem = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))?.[1]);
  process.stdout.write(`requests (hold + settlement): ${(done / secs).toFixed(0)}/s with ${WORKERS} in flight over ${TENANTS} tenants\n`);
  process.stdout.write(`Redis CPU: ${((redisCpu / done) * 1e6).toFixed(1)} µs per request (${(redisCpu / secs).toFixed(2)} cores)\n`);
  process.stdout.write(`Redis memory after ${done} requests: ${(mem / 1e6).toFixed(1)} MB (${(mem / done).toFixed(0)} bytes per request kept: hold tombstone, usage record, ledger entry)\n`);
} finally {
  await ledger.close();
  admin.disconnect();
  await redis.stop();
}
