/**
 * What an idle pause costs the next piece of work on this machine: the same
 * chat admission (parse, validate, price, serialise the upstream body: the
 * bench's one-line prompt) timed right after the event loop was busy, and
 * after it slept for 1, 3 and 10 ms. At one connection every process of the
 * topology (Envoy, the sidecar, Redis, the provider) sleeps between its hops
 * of a request, so each hop's work runs at the "after a pause" speed, not at
 * the speed a micro-benchmark reports. On a virtual machine whose idle CPU is
 * handed back to the host, that speed can be several times slower (caches and
 * branch predictors refilled, the CPU woken): this is part of why the same
 * code adds several times more latency on one box than on another
 * (docs/benchmark.md). Prints p50 and p90 per pause.
 *
 *   npx tsx test/bench/cold-cpu.ts      COLD_SAMPLES (default 400 per pause)
 */
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { admitBody } from '../../sidecar/src/domain/admission.js';
import { LiveConfig } from '../../sidecar/src/domain/live-config.js';
import { latencyStats } from './latency.js';
import { fmt, table } from './report.js';
import { chatBody } from './scenarios.js';

const SAMPLES = Number(process.env.COLD_SAMPLES ?? 400);
if (!Number.isInteger(SAMPLES) || SAMPLES < 50) throw new Error('COLD_SAMPLES must be an integer of at least 50');

const policy = new LiveConfig(parseConfig(defaultConfig('svc'))).current.admission;
const body = Buffer.from(chatBody('svc-core'));
const admit = (): void => {
  const r = admitBody('chat', 'POST', body, policy);
  if (!r.ok) throw new Error('cold-cpu: the bench body was refused');
};

for (let i = 0; i < 20_000; i++) admit(); // optimised before anything is timed

/** Waits `ms` (0: one turn of the event loop, which stays busy), then times one admission in µs. */
async function sample(ms: number): Promise<number> {
  await new Promise((r) => (ms === 0 ? setImmediate(r) : setTimeout(r, ms)));
  const t0 = performance.now();
  admit();
  return (performance.now() - t0) * 1000;
}

const PAUSES = [0, 1, 3, 10];
const times = new Map<number, number[]>(PAUSES.map((p) => [p, []]));
// In turns, so a change in the machine's load reaches every pause alike.
for (let i = 0; i < SAMPLES; i++) for (const p of PAUSES) times.get(p)!.push(await sample(p));

const busy = latencyStats(times.get(0)!).p50;
process.stdout.write(`one chat admission (${body.length} bytes), ${SAMPLES} samples per pause; µs\n`);
process.stdout.write(
  `${table(
    ['before it', 'p50 µs', 'p90 µs', 'p50 vs busy'],
    PAUSES.map((p) => {
      const s = latencyStats(times.get(p)!);
      return [p === 0 ? 'busy loop (setImmediate)' : `${p} ms asleep`, fmt(s.p50), fmt(s.p90), `${fmt(s.p50 / busy)}x`];
    }),
  )}\n`,
);
