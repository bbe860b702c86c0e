/**
 * A small change measured against the commit before it, on the same box at
 * the same time: starts the full gateway of this checkout and of another one
 * (each with its own test harness, simulator and, for redis, redis-server) and
 * sends chats to the two alternately, one at a time on one keep-alive
 * connection each, so drift and neighbours hit both alike. `npm run bench`
 * runs its targets one after another; on a noisy box a change of a few tenths
 * of a millisecond drowns in the difference between two of its runs.
 *
 *   git worktree add /tmp/base <commit>
 *   ln -s "$PWD/node_modules" /tmp/base/node_modules && ln -s "$PWD/.tools" /tmp/base/.tools
 *   npx tsx test/bench/ab-latency.ts /tmp/base
 *
 *   AB_REQUESTS  measured requests per checkout (default 3000)
 *   AB_LOAD_WARMUP_SECONDS  load at 16 connections per checkout before anything else
 *                (warm-up.ts: the sidecar's code optimized, as in service; default 5;
 *                0: none, as before session 21)
 *   AB_WARMUP    unmeasured requests per checkout first, one at a time (default 300)
 *   AB_STORE     memory (default) or redis (with the credit check on)
 *   AB_BLOCK     requests to one checkout before the other's turn (default 1;
 *                n > 1 leaves each block's first request unmeasured, so work
 *                deferred past an answer lands on its own checkout's next request)
 *   AB_KIND      json (default: time to the last byte), stream (32 chunks
 *                written at once) or sliced (the same in 1-500-byte slices
 *                1 ms apart): time to the first complete event and to [DONE]
 *
 * Prints p50/p90/p99/mean per checkout and measure, and the median of the
 * paired differences (this − other, request i of each); the last line is
 * `AB_JSON {...}`. Every answer must be a 200. The harness's gateway is the
 * integration tests' (log level info, test settings), not the bench's:
 * compare the two rows with each other, not with `npm run bench`.
 */
import type { GatewayOptions, TestGateway } from '../harness/gateway.js';
import { startGateway } from '../harness/gateway.js';
import { startGatewayIn, type StartGateway } from './checkout.js';
import { SequentialClient, StreamClient, latencyStats } from './latency.js';
import { chatBody, streamBody, STREAM_TOKENS } from './scenarios.js';
import { fmt, table } from './report.js';
import { CREDIT_GRANT, GATEWAY_VARIANTS } from './targets.js';
import { LOAD_WARMUP_SECONDS, warmUnderLoad } from './warm-up.js';

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
/**
 * Requests to one checkout before the other's turn (default 1: strict alternation).
 * Work a gateway defers until after its answer (its log line, a settlement written
 * after the answer) runs while the next request is served: with blocks of one that
 * request is the other checkout's, which is then charged for it. With blocks of
 * n > 1 each request but a block's first follows its own checkout's.
 */
const BLOCK = Math.max(1, envInt('AB_BLOCK', 1));
const WARMUP = envInt('AB_WARMUP', 300);
const LOAD_WARMUP = envInt('AB_LOAD_WARMUP_SECONDS', LOAD_WARMUP_SECONDS);
const STORE = process.env.AB_STORE === 'redis' ? 'redis' : 'memory';
const KIND = process.env.AB_KIND === 'stream' || process.env.AB_KIND === 'sliced' ? process.env.AB_KIND : 'json';
const ALIAS = 'svc-core';
/** Content chunks, the role chunk, the finish chunk, the usage chunk and [DONE]. */
const STREAM_EVENTS = STREAM_TOKENS + 4;

/** One request: its measures in ms (by name), or a problem. */
type One = () => Promise<Record<string, number>>;

const startOther = await startGatewayIn(other);

const options: GatewayOptions = STORE === 'redis' ? GATEWAY_VARIANTS.credit.options : { store: 'memory' };

async function ready(start: StartGateway): Promise<{ gw: TestGateway; one: One }> {
  const gw = await start(options);
  if (STORE === 'redis') await gw.admin.adjustCredits(gw.tenantId, CREDIT_GRANT, 'ab-grant', 'bench');
  const spec = (body: string) => ({
    url: `${gw.base}/chat/completions`,
    method: 'POST',
    headers: { authorization: `Bearer ${gw.key}`, 'content-type': 'application/json' },
    body,
  });
  if (KIND === 'json') {
    await warmUnderLoad(spec(chatBody(ALIAS)), 16, LOAD_WARMUP);
    const client = new SequentialClient(spec(chatBody(ALIAS)));
    return {
      gw,
      one: async () => {
        const r = await client.one();
        if (r.status !== 200) throw new Error(`status ${r.status}`);
        return { total: r.ms };
      },
    };
  }
  const check = (status: number, _body: string, events: number) =>
    status !== 200 ? `status ${status}` : events !== STREAM_EVENTS ? `${events} events, expected ${STREAM_EVENTS}` : null;
  await warmUnderLoad(spec(streamBody(ALIAS, STREAM_TOKENS, 0, KIND === 'sliced')), 16, LOAD_WARMUP, check);
  const client = new StreamClient(spec(streamBody(ALIAS, STREAM_TOKENS, 0, KIND === 'sliced')), check);
  return {
    gw,
    one: async () => {
      const r = await client.one();
      const problem = check(r.status, r.body, r.events);
      if (problem) throw new Error(problem);
      return { first_event: r.firstEventMs, done: r.doneMs };
    },
  };
}

const sides = { this: await ready(startGateway), other: await ready(startOther) };
const ms: Record<keyof typeof sides, Record<string, number[]>> = { this: {}, other: {} };
const sent = { this: 0, other: 0 };
const measured = (side: keyof typeof sides) => Object.values(ms[side])[0]?.length ?? 0;
try {
  for (let round = 0; measured('this') < REQUESTS || measured('other') < REQUESTS; round++) {
    // Alternate which goes first, so neither always follows the other's requests.
    for (const side of round % 2 ? (['this', 'other'] as const) : (['other', 'this'] as const)) {
      for (let j = 0; j < BLOCK; j++) {
        const r = await sides[side].one().catch((err: Error) => {
          throw new Error(`${side}: ${err.message}`);
        });
        sent[side] += 1;
        // A block's first request follows the other checkout's: not measured (unless blocks of one).
        if (sent[side] <= WARMUP || (BLOCK > 1 && j === 0) || measured(side) >= REQUESTS) continue;
        for (const [k, v] of Object.entries(r)) (ms[side][k] ??= []).push(v);
      }
    }
  }
} finally {
  await Promise.all([sides.this.gw.stop(), sides.other.gw.stop()]);
}

const measures = Object.keys(ms.this);
const result = Object.fromEntries(measures.map((m) => [m, { this: latencyStats(ms.this[m] as number[]), other: latencyStats(ms.other[m] as number[]) }]));
const paired = Object.fromEntries(measures.map((m) => [m, latencyStats((ms.this[m] as number[]).map((x, i) => x - ((ms.other[m] as number[])[i] as number))).p50]));
console.log(`${KIND} chat, one connection each, ${REQUESTS} measured requests per checkout, store ${STORE}, blocks of ${BLOCK}; other = ${other}`);
console.log(
  table(
    ['measure', 'checkout', 'p50 ms', 'p90 ms', 'p99 ms', 'mean ms'],
    measures.flatMap((m) =>
      (['this', 'other'] as const).map((k) => {
        const r = (result[m] as Record<'this' | 'other', ReturnType<typeof latencyStats>>)[k];
        return [m, k, fmt(r.p50, 3), fmt(r.p90, 3), fmt(r.p99, 3), fmt(r.mean, 3)];
      }),
    ),
    2,
  ),
);
for (const m of measures) {
  const r = result[m] as Record<'this' | 'other', ReturnType<typeof latencyStats>>;
  console.log(`${m}, this − other: p50 ${fmt(r.this.p50 - r.other.p50, 3)} ms, mean ${fmt(r.this.mean - r.other.mean, 3)} ms, median of paired differences ${fmt(paired[m] as number, 3)} ms`);
}
console.log(`AB_JSON ${JSON.stringify({ time: new Date().toISOString(), kind: KIND, store: STORE, requests: REQUESTS, block: BLOCK, other, result, paired_median_ms: paired })}`);
process.exit(0);
