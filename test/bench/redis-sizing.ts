/**
 * Redis sizing, measured on a private redis-server (never the shared one):
 * the keys one tenant uses, and the memory one settled request costs (its
 * usage record, its ledger entry, its settled hold kept 7 days for
 * idempotency), extrapolated to a million. `npm run sizing [-- N]` (default
 * N = 200000 settled requests).
 */
import { Redis } from 'ioredis';
import { createRedisLedger } from '../../sidecar/src/store/redis-ledger.js';
import { createRedisStore } from '../../sidecar/src/store/redis.js';
import { startRedis } from '../harness/redis.js';

const N = Number(process.argv[2] ?? 200_000);
const BATCH = 200;
const PERIOD = '2026-11';

async function usedMemory(r: Redis): Promise<number> {
  const info = await r.info('memory');
  return Number(/used_memory:(\d+)/.exec(info)?.[1] ?? 0);
}

async function memoryOf(r: Redis, pattern: string): Promise<{ keys: number; bytes: number }> {
  let keys = 0;
  let bytes = 0;
  let cursor = '0';
  do {
    const [next, found] = await r.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    for (const k of found) {
      keys += 1;
      bytes += Number(await r.call('MEMORY', 'USAGE', k, 'SAMPLES', '0'));
    }
  } while (cursor !== '0');
  return { keys, bytes };
}

async function main(): Promise<void> {
  const server = await startRedis();
  const raw = new Redis(server.url);
  const store = createRedisStore({ url: server.url, prefix: 'svc', commandTimeoutMs: 30_000 });
  const ledger = createRedisLedger({ url: server.url, prefix: 'svc', commandTimeoutMs: 30_000 });
  try {
    // One tenant as the gateway uses it: record, two keys, a grant, a cap, requests over two days.
    const tenantId = 'ten_0123456789abcdef';
    await store.createTenant({ id: tenantId, name: 'Sizing tenant', createdAt: new Date().toISOString() });
    const now = Date.now();
    const usage = (requestId: string, day: string) => ({
      tenantId,
      requestId,
      charge: 1_234,
      creditCheck: true,
      period: PERIOD,
      day,
      now,
      usage: {
        time: new Date(now).toISOString(),
        tenantId,
        keyId: 'key_0123456789abcdef',
        alias: 'svc-quick',
        internalModel: 'provider-model-small-2026-08',
        promptTokens: 812,
        completionTokens: 164,
        totalTokens: 976,
        requestCount: 1,
        requestId,
        estimated: false,
      },
    });
    await ledger.adjustBalance(tenantId, 10_000_000_000_000, 'grant-1', 'sizing', now);
    await ledger.setCap(tenantId, 9_000_000_000_000);
    const before = await usedMemory(raw);
    for (let i = 0; i < N; i += BATCH) {
      await Promise.all(
        Array.from({ length: Math.min(BATCH, N - i) }, async (_, j) => {
          const requestId = `chatcmpl-${(i + j).toString(16).padStart(24, '0')}`;
          await ledger.reserve({
            tenantId,
            requestId,
            keyId: 'key_0123456789abcdef',
            amount: 5_000,
            tokens: 1_000,
            creditCheck: true,
            period: PERIOD,
            minute: Math.floor(now / 60_000),
            now,
            holdTtlSeconds: 300,
            limits: { scopeId: 'key_0123456789abcdef', requestsPerMinute: null, tokensPerMinute: null },
          });
          await ledger.settle(usage(requestId, (i + j) % 2 === 0 ? '2026-11-22' : '2026-11-23'));
        }),
      );
    }
    const after = await usedMemory(raw);
    const perRequest = (after - before) / N;
    const usageStream = await memoryOf(raw, `svc:usage:{${tenantId}}`);
    const ledgerStream = await memoryOf(raw, `svc:ledger:{${tenantId}}`);
    const holds = await memoryOf(raw, `svc:hold:{${tenantId}}:*`);
    const all = await raw.keys('svc:*');
    const kinds = new Map<string, number>();
    for (const k of all) {
      const kind = k.replace(/\{[^}]*\}/, '{t}').replace(/:(chatcmpl|key_|[0-9a-f]{64}).*$/, ':<id>').replace(/:day:.*$/, ':day:<day>');
      kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
    }
    const mib = (b: number) => `${(b / 1024 / 1024).toFixed(1)} MiB`;
    const lines = [
      `redis-server ${(/redis_version:(\S+)/.exec(await raw.info('server')) ?? [])[1]}, ${N} settled requests, one tenant`,
      `used_memory grew ${mib(after - before)}: ${perRequest.toFixed(0)} bytes per settled request → ${mib(perRequest * 1e6)} per million`,
      `  usage stream: ${mib(usageStream.bytes)} (${(usageStream.bytes / N).toFixed(0)} B/record → ${mib((usageStream.bytes / N) * 1e6)} per million)`,
      `  ledger stream: ${mib(ledgerStream.bytes)} (${(ledgerStream.bytes / N).toFixed(0)} B/entry)`,
      `  settled holds (kept 7 days): ${holds.keys} keys, ${mib(holds.bytes)} (${(holds.bytes / N).toFixed(0)} B each)`,
      'keys by kind:',
      ...[...kinds.entries()].sort().map(([k, n]) => `  ${k}: ${n}`),
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    raw.disconnect();
    await store.close();
    await ledger.close();
    await server.stop();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 1;
});
