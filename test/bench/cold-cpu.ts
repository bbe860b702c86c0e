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
 * (docs/benchmark.md). Prints p50 and p90 per pause; `npm run bench` prints
 * the same table before its targets.
 *
 *   npx tsx test/bench/cold-cpu.ts      COLD_SAMPLES (default 400 per pause)
 */
import { pathToFileURL } from 'node:url';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { admitBody } from '../../sidecar/src/domain/admission.js';
import { LiveConfig } from '../../sidecar/src/domain/live-config.js';
import { latencyStats } from './latency.js';
import { fmt, table } from './report.js';
import { chatBody } from './scenarios.js';

const PAUSES = [0, 1, 3, 10] as const;

export interface ColdCpu {
  readonly bodyBytes: number;
  readonly samples: number;
  /** Per pause before the work (0: the event loop stayed busy): p50 and p90 µs of one admission. */
  readonly rows: ReadonlyArray<{ readonly pauseMs: number; readonly p50Us: number; readonly p90Us: number }>;
}

/** Times one admission `samples` times after each pause, the pauses in turns (a change in the box's load reaches all alike). */
export async function measureColdCpu(samples = 400): Promise<ColdCpu> {
  const policy = new LiveConfig(parseConfig(defaultConfig('svc'))).current.admission;
  const body = Buffer.from(chatBody('svc-core'));
  const admit = (): void => {
    if (!admitBody('chat', 'POST', body, policy).ok) throw new Error('cold-cpu: the bench body was refused');
  };
  for (let i = 0; i < 20_000; i++) admit(); // optimised before anything is timed
  const sample = async (ms: number): Promise<number> => {
    await new Promise((r) => (ms === 0 ? setImmediate(r) : setTimeout(r, ms)));
    const t0 = performance.now();
    admit();
    return (performance.now() - t0) * 1000;
  };
  const times = new Map<number, number[]>(PAUSES.map((p) => [p, []]));
  for (let i = 0; i < samples; i++) for (const p of PAUSES) times.get(p)!.push(await sample(p));
  return {
    bodyBytes: body.length,
    samples,
    rows: PAUSES.map((p) => {
      const s = latencyStats(times.get(p)!);
      return { pauseMs: p, p50Us: s.p50, p90Us: s.p90 };
    }),
  };
}

/** The table, and how many times slower the work ran after `pauseMs` asleep than busy (p50). */
export function coldCpuTable(c: ColdCpu): string {
  const busy = c.rows[0]!.p50Us;
  return table(
    ['before it', 'p50 µs', 'p90 µs', 'p50 vs busy'],
    c.rows.map((r) => [r.pauseMs === 0 ? 'busy loop (setImmediate)' : `${r.pauseMs} ms asleep`, fmt(r.p50Us), fmt(r.p90Us), `${fmt(r.p50Us / busy)}x`]),
  );
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const samples = Number(process.env.COLD_SAMPLES ?? 400);
  if (!Number.isInteger(samples) || samples < 50) throw new Error('COLD_SAMPLES must be an integer of at least 50');
  const c = await measureColdCpu(samples);
  process.stdout.write(`one chat admission (${c.bodyBytes} bytes), ${c.samples} samples per pause; µs\n${coldCpuTable(c)}\n`);
}
