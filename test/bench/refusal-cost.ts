/**
 * What a refused request costs: a flood of chats without a key (401) at 16
 * connections against one full gateway (Redis store, credit check on), after
 * REFUSAL_WARMUP_SECONDS of the same flood; prints refusals per second and the
 * sidecar's and Envoy's CPU per refusal (/proc). Since session 22 Envoy skips
 * ext_proc for a request ext_authz admitted no tenant for, so a refusal costs
 * the sidecar one gRPC call instead of two (docs/benchmark.md).
 *
 *   npx tsx test/bench/refusal-cost.ts [other checkout]   REFUSAL_SECONDS (default 8),
 *                                                         REFUSAL_WARMUP_SECONDS (default 5),
 *                                                         REFUSAL_ROUNDS (default 2)
 *
 * With another checkout's path (a worktree with node_modules and .tools linked, as
 * for ab-cpu.ts), each round runs this checkout's gateway and then that one's.
 */
import autocannon from 'autocannon';
import { startGatewayIn, type StartGateway } from './checkout.js';
import { procCpuMs } from './proc.js';
import { envInteger, fmt, table } from './report.js';
import { autocannonOptions } from './warm-up.js';

const SECONDS = envInteger('REFUSAL_SECONDS', 8);
const WARMUP = envInteger('REFUSAL_WARMUP_SECONDS', 5, 0);
const ROUNDS = envInteger('REFUSAL_ROUNDS', 2);
const other = process.argv[2];

async function flood(start: StartGateway): Promise<{ perSecond: number; sidecarMs: number; envoyMs: number; other: number }> {
  const gw = await start({ store: 'redis', config: { billing: { creditCheck: true } } });
  try {
    const opts = autocannonOptions(
      { url: `${gw.base}/chat/completions`, method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'svc-quick', messages: [{ role: 'user', content: 'hello' }] }) },
      16,
    );
    if (WARMUP > 0) await autocannon({ ...opts, duration: WARMUP });
    const sidecar = gw.stack.process('sidecar').pid;
    const envoy = gw.stack.process('envoy').pid;
    const s0 = procCpuMs(sidecar);
    const e0 = procCpuMs(envoy);
    const r = await autocannon({ ...opts, duration: SECONDS });
    const s1 = procCpuMs(sidecar);
    const e1 = procCpuMs(envoy);
    // Every answer should be the 401 envelope: anything else is counted and shown.
    const refused = r['4xx'];
    return { perSecond: refused / SECONDS, sidecarMs: (s1 - s0) / refused, envoyMs: (e1 - e0) / refused, other: r['2xx'] + r['5xx'] + r.errors + r.timeouts };
  } finally {
    await gw.stop();
  }
}

const sides: Array<[string, StartGateway]> = [['this checkout', await startGatewayIn(process.cwd())]];
if (other) sides.push([other, await startGatewayIn(other)]);
const rows: string[][] = [];
for (let round = 1; round <= ROUNDS; round++) {
  for (const [label, start] of sides) {
    const m = await flood(start);
    rows.push([String(round), label, fmt(m.perSecond, 0), fmt(m.sidecarMs, 3), fmt(m.envoyMs, 3), String(m.other)]);
  }
}
process.stdout.write(
  `refusals (401, no key) at 16 connections, ${SECONDS} s per block after ${WARMUP} s of the same\n` +
    table(['round', 'gateway', 'refusals/s', 'sidecar CPU ms per refusal', 'Envoy CPU ms per refusal', 'other answers'], rows, 2) +
    '\n',
);
