/**
 * A small change measured against the commit before it, on the same box at
 * the same time: starts the full gateway of this checkout and of another one
 * (each with its own test harness, simulator and, for redis, redis-server) and
 * sends JSON chats to the two alternately, one at a time on one keep-alive
 * connection each, so drift and neighbours hit both alike. `npm run bench`
 * runs its targets one after another; on a noisy box a change of a few tenths
 * of a millisecond drowns in the difference between two of its runs.
 *
 *   git worktree add /tmp/base <commit>
 *   ln -s "$PWD/node_modules" /tmp/base/node_modules && ln -s "$PWD/.tools" /tmp/base/.tools
 *   npx tsx test/bench/ab-latency.ts /tmp/base
 *
 *   AB_REQUESTS  measured requests per checkout (default 3000)
 *   AB_WARMUP    unmeasured requests per checkout first (default 300)
 *   AB_STORE     memory (default) or redis (with the credit check on)
 *
 * Prints p50/p90/p99/mean per checkout and the median of the paired
 * differences (this − other, request i of each); the last line is
 * `AB_JSON {...}`. Every answer must be a 200. The harness's gateway is the
 * integration tests' (log level info, test settings), not the bench's:
 * compare the two rows with each other, not with `npm run bench`.
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { GatewayOptions, TestGateway } from '../harness/gateway.js';
import { startGateway } from '../harness/gateway.js';
import { SequentialClient } from './latency.js';
import { chatBody } from './scenarios.js';
import { fmt, table } from './report.js';
import { CREDIT_GRANT, GATEWAY_VARIANTS } from './targets.js';

const envInt = (name: string, dflt: number) => {
  const v = Number(process.env[name] ?? dflt);
  if (!Number.isInteger(v) || v < 0) throw new Error(`${name} must be a non-negative integer`);
  return v;
};
const other = process.argv[2];
if (!other) {
  console.error('usage: npx tsx test/bench/ab-latency.ts <path of the other checkout>');
  process.exit(2);
}
const REQUESTS = envInt('AB_REQUESTS', 3000);
const WARMUP = envInt('AB_WARMUP', 300);
const STORE = process.env.AB_STORE === 'redis' ? 'redis' : 'memory';
const ALIAS = 'svc-core';

type Start = (opts: GatewayOptions) => Promise<TestGateway>;
const otherHarness = pathToFileURL(resolve(other, 'test/harness/gateway.ts')).href;
const startOther = ((await import(otherHarness)) as { startGateway: Start }).startGateway;

const options: GatewayOptions = STORE === 'redis' ? GATEWAY_VARIANTS.credit.options : { store: 'memory' };

async function ready(start: Start): Promise<{ gw: TestGateway; client: SequentialClient }> {
  const gw = await start(options);
  if (STORE === 'redis') await gw.admin.adjustCredits(gw.tenantId, CREDIT_GRANT, 'ab-grant', 'bench');
  const client = new SequentialClient({
    url: `${gw.base}/chat/completions`,
    method: 'POST',
    headers: { authorization: `Bearer ${gw.key}`, 'content-type': 'application/json' },
    body: chatBody(ALIAS),
  });
  return { gw, client };
}

const sides = { this: await ready(startGateway), other: await ready(startOther) };
const ms: Record<keyof typeof sides, number[]> = { this: [], other: [] };
try {
  for (let i = 0; i < WARMUP + REQUESTS; i++) {
    // Alternate which goes first, so neither always follows the other's request.
    for (const side of i % 2 ? (['this', 'other'] as const) : (['other', 'this'] as const)) {
      const r = await sides[side].client.one();
      if (r.status !== 200) throw new Error(`${side}: status ${r.status}`);
      if (i >= WARMUP) ms[side].push(r.ms);
    }
  }
} finally {
  await Promise.all([sides.this.gw.stop(), sides.other.gw.stop()]);
}

const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
const stats = (a: number[]) => {
  const s = [...a].sort((x, y) => x - y);
  return { p50: quantile(s, 0.5), p90: quantile(s, 0.9), p99: quantile(s, 0.99), mean: a.reduce((t, x) => t + x, 0) / a.length };
};
const result = { this: stats(ms.this), other: stats(ms.other) };
const paired = stats(ms.this.map((x, i) => x - (ms.other[i] as number)));
console.log(`JSON chat, one connection each, ${REQUESTS} measured requests per checkout, store ${STORE}; other = ${other}`);
console.log(
  table(
    ['checkout', 'p50 ms', 'p90 ms', 'p99 ms', 'mean ms'],
    (['this', 'other'] as const).map((k) => [k, fmt(result[k].p50, 3), fmt(result[k].p90, 3), fmt(result[k].p99, 3), fmt(result[k].mean, 3)]),
  ),
);
console.log(`this − other: p50 ${fmt(result.this.p50 - result.other.p50, 3)} ms, mean ${fmt(result.this.mean - result.other.mean, 3)} ms, median of paired differences ${fmt(paired.p50, 3)} ms`);
console.log(`AB_JSON ${JSON.stringify({ time: new Date().toISOString(), store: STORE, requests: REQUESTS, other, result, paired_median_ms: paired.p50 })}`);
process.exit(0);
