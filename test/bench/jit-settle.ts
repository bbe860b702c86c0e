/**
 * How long V8 keeps compiling at one connection: the Redis gateway with the
 * credit check on, started as the bench starts it (its sidecar and simulator
 * under `--trace-opt --trace-deopt`), given the bench's load warm-up (16
 * connections, warm-up.ts), then sent JSON chats one at a time. Prints, per
 * block of chats, the functions V8 started optimizing with TurboFan in the
 * sidecar and in the simulator, the deoptimizations, and the block's p50 and
 * p99. A TurboFan job runs on a helper thread for one to several ms; on two
 * cores it takes a CPU from the chat in flight (sched-tail.ts shows them in
 * the slowest 1 %), so the bench's latency phase measures after the count
 * has fallen to a few per thousand (BENCH_WARMUP).
 *
 *   npx tsx test/bench/jit-settle.ts     JIT_REQUESTS (default 6000), JIT_BLOCK (default 500)
 *                                        JIT_LOAD_WARMUP_SECONDS (default 5)
 *                                        JIT_TRACE=0: no tracing (the latency without the trace's own output)
 */
import { startGateway } from '../harness/gateway.js';
import { CREDIT_GRANT, GATEWAY_VARIANTS } from './targets.js';
import { chatBody } from './scenarios.js';
import { SequentialClient, latencyStats } from './latency.js';
import { envInteger, fmt, table } from './report.js';
import { LOAD_WARMUP_SECONDS, warmUnderLoad } from './warm-up.js';

const REQUESTS = envInteger('JIT_REQUESTS', 6000, 100);
const BLOCK = envInteger('JIT_BLOCK', 500, 10);
const LOAD_WARMUP = envInteger('JIT_LOAD_WARMUP_SECONDS', LOAD_WARMUP_SECONDS, 0);
const TRACED = ['sidecar', 'simulator'] as const;
const TRACE = process.env.JIT_TRACE !== '0';

const gw = await startGateway({
  ...GATEWAY_VARIANTS.credit.options,
  nodeArgs: TRACE ? Object.fromEntries(TRACED.map((name) => [name, ['--trace-opt', '--trace-deopt']])) : {},
});
try {
  await gw.admin.adjustCredits(gw.tenantId, CREDIT_GRANT, 'jit-settle-grant', 'bench');
  // V8's trace lines, per process: "[compiling method ... (target TURBOFAN) ..." and "[bailout (kind: deopt-...".
  const counts = { compiles: new Map<string, number>(), deopts: new Map<string, number>() };
  const stops = TRACED.map((name) =>
    gw.stack.process(name).watchLines((line) => {
      const kind = /^\[compiling method .*TURBOFAN/.test(line) ? counts.compiles : /^\[bailout \(kind: deopt/.test(line) ? counts.deopts : null;
      if (kind) kind.set(name, (kind.get(name) ?? 0) + 1);
    }),
  );
  const url = `${gw.base}/chat/completions`;
  const body = chatBody('svc-core');
  await warmUnderLoad({ url, method: 'POST', headers: { 'x-api-key': gw.key, 'content-type': 'application/json' }, body }, 16, LOAD_WARMUP);
  const client = new SequentialClient({ url, method: 'POST', headers: { 'x-api-key': gw.key, 'content-type': 'application/json' }, body });
  const rows: string[][] = [];
  const take = (m: Map<string, number>, name: string) => {
    const n = m.get(name) ?? 0;
    m.set(name, 0);
    return String(n);
  };
  // What the load warm-up compiled is not counted.
  for (const name of TRACED) {
    take(counts.compiles, name);
    take(counts.deopts, name);
  }
  for (let done = 0; done < REQUESTS; done += BLOCK) {
    const block = await client.run(BLOCK);
    if (block.non2xx + block.errors > 0) throw new Error(`jit-settle: ${block.firstProblem}`);
    await new Promise((r) => setTimeout(r, 100)); // the block's last trace lines
    const s = latencyStats(block.okMs);
    rows.push([
      `${done + 1}-${done + BLOCK}`,
      ...TRACED.flatMap((name) => (TRACE ? [take(counts.compiles, name), take(counts.deopts, name)] : ['-', '-'])),
      fmt(s.p50),
      fmt(s.p99),
    ]);
  }
  for (const stop of stops) stop();
  client.close();
  process.stdout.write(
    `JSON chats at one connection after ${LOAD_WARMUP} s of load at 16 connections (Redis, credit check on); per block of ${BLOCK}:\n` +
      `${table(['chats', ...TRACED.flatMap((n) => [`${n}: TurboFan jobs`, `${n}: deopts`]), 'p50 ms', 'p99 ms'], rows)}\n`,
  );
} finally {
  await gw.stop();
}
