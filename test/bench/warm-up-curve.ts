/**
 * How long a freshly started gateway takes to reach its steady speed: starts
 * the gateway the bench measures (Redis store, credit check on), sends JSON
 * chats one at a time from the first request on, and prints the p50 of each
 * bucket of seconds with the requests served so far, and the CPU each process
 * spent per request in that bucket (/proc). The first few thousand requests
 * run the Node processes' request paths in V8's baseline tier (warm-up.ts);
 * their CPU per request drops once the code is optimized.
 *
 *   npx tsx test/bench/warm-up-curve.ts    CURVE_SECONDS (default 60), CURVE_BUCKET_SECONDS (default 5),
 *                                          CURVE_LOAD_WARMUP_SECONDS (default 0): load at 16 connections
 *                                          first, as the bench gives every target (then the curve is flat),
 *                                          CURVE_SIDECAR_ARGS: Node flags for the sidecar (e.g. "--maglev")
 */
import { startGateway } from '../harness/gateway.js';
import { SequentialClient, latencyStats } from './latency.js';
import { chatBody } from './scenarios.js';
import { CREDIT_GRANT, GATEWAY_VARIANTS } from './targets.js';
import { envInteger, fmt, table } from './report.js';
import { warmUnderLoad } from './warm-up.js';
import { addCpu, cpuSnapshot } from './proc.js';

const SECONDS = envInteger('CURVE_SECONDS', 60);
const BUCKET = envInteger('CURVE_BUCKET_SECONDS', 5);
const LOAD_WARMUP = envInteger('CURVE_LOAD_WARMUP_SECONDS', 0, 0);
const SIDECAR_ARGS = (process.env.CURVE_SIDECAR_ARGS ?? '').split(' ').filter(Boolean);

async function main(): Promise<void> {
  const spec = GATEWAY_VARIANTS.credit;
  const gw = await startGateway({ ...spec.options, nodeArgs: { sidecar: SIDECAR_ARGS } });
  try {
    await gw.admin.adjustCredits(gw.tenantId, CREDIT_GRANT, 'curve-grant', 'warm-up curve');
    const request = { url: `${gw.base}/chat/completions`, method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': gw.key }, body: chatBody('svc-core') };
    const warmed = await warmUnderLoad(request, 16, LOAD_WARMUP);
    const client = new SequentialClient(request);
    const pids = { sidecar: gw.stack.process('sidecar').pid, envoy: gw.stack.process('envoy').pid, simulator: gw.stack.process('simulator').pid };
    const shown = [...Object.keys(pids), 'bench'];
    const rows: string[][] = [];
    let served = warmed;
    try {
      for (let b = 0; b < Math.ceil(SECONDS / BUCKET); b++) {
        const until = performance.now() + BUCKET * 1000;
        const ms: number[] = [];
        const before = cpuSnapshot(pids);
        while (performance.now() < until) {
          const t0 = performance.now();
          const r = await client.one();
          if (r.status !== 200) throw new Error(`a chat failed with ${r.status}`);
          ms.push(performance.now() - t0);
        }
        const cpu: Record<string, number> = {};
        addCpu(cpu, before, cpuSnapshot(pids));
        served += ms.length;
        const s = latencyStats(ms);
        const perReq = shown.map((k) => fmt((cpu[k] ?? 0) / ms.length, 3));
        rows.push([`${b * BUCKET}-${(b + 1) * BUCKET} s`, String(ms.length), String(served), fmt(s.p50, 3), fmt(s.p99, 3), ...perReq]);
      }
    } finally {
      client.close();
    }
    process.stdout.write(
      `JSON chats at one connection from the gateway's start (Redis store, credit check on${LOAD_WARMUP ? `; ${warmed} requests at 16 connections first` : ''}${SIDECAR_ARGS.length ? `; sidecar ${SIDECAR_ARGS.join(' ')}` : ''}), ms\n`,
    );
    process.stdout.write(`${table(['seconds', 'requests', 'served so far', 'p50', 'p99', ...shown.map((k) => `${k} CPU/req`)], rows)}\n`);
  } finally {
    await gw.stop();
  }
}

await main();
