/**
 * The sidecar's CPU per request of this checkout against another one, under
 * load, on the same box at the same time: starts both full gateways (each its
 * own harness, simulator, redis-server; Redis store with the credit check on)
 * and gives them blocks of load in turn (16 connections: AB_CPU_JSON JSON
 * chats, then AB_CPU_STREAMS 32-token streams), the order alternating per
 * round, reading each sidecar's CPU (/proc, every thread) around its blocks.
 * Run one after the other, two gateways' CPU per request drifts with the box
 * by more than a change is worth (session 18: 0.54 to 0.81 ms per JSON chat
 * for the same code within minutes); blocks side by side drift together.
 *
 *   git worktree add /tmp/base <commit>
 *   ln -s "$PWD/node_modules" /tmp/base/node_modules && ln -s "$PWD/.tools" /tmp/base/.tools
 *   npx tsx test/bench/ab-cpu.ts /tmp/base     AB_CPU_ROUNDS (default 6), AB_CPU_JSON (default 2000),
 *                                              AB_CPU_STREAMS (default 300), AB_CPU_TURNS (messages of
 *                                              history before each JSON chat's question, default 0),
 *                                              AB_CPU_OTHER_SIDECAR_ARGS='--flag ...' (more Node/V8 flags for the other
 *                                              side's sidecar: with `.` as the other checkout, a flag against none)
 *
 * Prints each round's ms per request and the medians, per checkout and kind.
 */
import type { TestGateway } from '../harness/gateway.js';
import { startGateway } from '../harness/gateway.js';
import { startGatewayIn, type StartGateway } from './checkout.js';
import { latencyStats } from './latency.js';
import { driveGateway } from './gateway-load.js';
import { procCpuMs } from './proc.js';
import { envInteger, fmt, table } from './report.js';
import { CREDIT_GRANT, GATEWAY_VARIANTS, flagsFrom, withSidecarArgs } from './targets.js';

const other = process.argv[2];
if (!other) {
  console.error('usage: npx tsx test/bench/ab-cpu.ts <path of the other checkout>');
  process.exit(2);
}
const ROUNDS = envInteger('AB_CPU_ROUNDS', 6);
const BLOCK = { json: envInteger('AB_CPU_JSON', 2000), stream: envInteger('AB_CPU_STREAMS', 300) } as const;
const CONNECTIONS = 16;
type Kind = keyof typeof BLOCK;
type Side = 'this' | 'other';

const startOther = await startGatewayIn(other);

const otherSidecarArgs = flagsFrom(process.env.AB_CPU_OTHER_SIDECAR_ARGS);

async function ready(start: StartGateway, sidecarArgs: readonly string[] = []): Promise<TestGateway> {
  const gw = await start(withSidecarArgs(GATEWAY_VARIANTS.credit.options, sidecarArgs));
  await gw.admin.adjustCredits(gw.tenantId, CREDIT_GRANT, 'ab-grant', 'bench');
  return gw;
}

const TURNS = envInteger('AB_CPU_TURNS', 0, 0);
const load = (gw: TestGateway, n: number, kind: Kind): Promise<number> => driveGateway(gw, n, kind, CONNECTIONS, TURNS);

const sides: Record<Side, TestGateway> = { this: await ready(startGateway), other: await ready(startOther, otherSidecarArgs) };
const perRequest: Record<Side, Record<Kind, number[]>> = { this: { json: [], stream: [] }, other: { json: [], stream: [] } };
try {
  // Warm-up: JIT and connections, not counted.
  for (const side of ['this', 'other'] as const) {
    await load(sides[side], 3 * BLOCK.json, 'json');
    await load(sides[side], 2 * BLOCK.stream, 'stream');
  }
  for (let round = 0; round < ROUNDS; round++) {
    for (const kind of ['json', 'stream'] as const) {
      for (const side of round % 2 ? (['this', 'other'] as const) : (['other', 'this'] as const)) {
        const pid = sides[side].stack.process('sidecar').pid;
        const before = procCpuMs(pid);
        await load(sides[side], BLOCK[kind], kind);
        perRequest[side][kind].push((procCpuMs(pid) - before) / BLOCK[kind]);
      }
    }
  }
} finally {
  await Promise.all([sides.this.stop(), sides.other.stop()]);
}

console.log(
  `sidecar CPU per request (ms, /proc, all threads), Redis store with the credit check, ${CONNECTIONS} connections, ${ROUNDS} rounds; other = ${other}` +
    (otherSidecarArgs.length ? ` with sidecar flags ${otherSidecarArgs.join(' ')}` : ''),
);
console.log(
  table(
    ['kind', 'checkout', 'median', 'each round'],
    (['json', 'stream'] as const).flatMap((kind) =>
      (['this', 'other'] as const).map((side) => [kind, side, fmt(latencyStats(perRequest[side][kind]).p50, 3), perRequest[side][kind].map((x) => fmt(x, 3)).join(' ')]),
    ),
    2,
  ),
);
