import type autocannon from 'autocannon';
import type { ThroughputResult } from './report.js';
import { latencyStats } from './latency.js';

/**
 * Every target's turn in each of `rounds` rounds, the order rotated by one
 * each round, so that drift on the box (another tenant, a slow minute, GC)
 * falls on every target alike instead of on whichever ran during it.
 */
export async function inRounds(targets: number, rounds: number, turn: (target: number, round: number) => Promise<void>): Promise<void> {
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < targets; i++) await turn((i + round) % targets, round);
  }
}

/** `requests` per runner in interleaved rounds: an equal share each round, the rest in the last. */
export async function interleaved(runners: ReadonlyArray<(n: number) => Promise<unknown>>, requests: number, rounds: number): Promise<void> {
  const r = Math.max(1, Math.min(rounds, requests));
  const base = Math.floor(requests / r);
  await inRounds(runners.length, r, async (t, round) => {
    await runners[t]!(round === r - 1 ? requests - base * (r - 1) : base);
  });
}

/** `seconds` of load per runner in interleaved rounds of `seconds / rounds` each. */
export async function loadRounds(slices: ReadonlyArray<(seconds: number) => Promise<void>>, seconds: number, rounds: number): Promise<void> {
  const r = Math.max(1, rounds);
  await inRounds(slices.length, r, async (t) => {
    await slices[t]!(seconds / r);
  });
}

/** What ThroughputTally reads of one autocannon run. */
export type AutocannonFigures = Pick<autocannon.Result, 'requests' | '2xx' | 'non2xx' | '4xx' | '5xx' | 'errors' | 'timeouts' | 'duration' | 'latency'>;

/** One target's autocannon figures, summed over its slices, with the CPU its processes spent in them. */
export class ThroughputTally {
  private total = 0;
  private ok2xx = 0;
  private non2xx = 0;
  private s4xx = 0;
  private s5xx = 0;
  private errors = 0;
  private timeouts = 0;
  private durationS = 0;
  private readonly p50s: number[] = [];
  private readonly p99s: number[] = [];
  /** CPU ms by process over the slices (proc.ts addCpu). */
  readonly cpu: Record<string, number> = {};

  add(r: AutocannonFigures): void {
    this.total += r.requests.total;
    this.ok2xx += r['2xx'];
    this.non2xx += r.non2xx;
    this.s4xx += r['4xx'];
    this.s5xx += r['5xx'];
    this.errors += r.errors;
    this.timeouts += r.timeouts;
    this.durationS += r.duration;
    this.p50s.push(r.latency.p50);
    this.p99s.push(r.latency.p99);
  }

  result(): ThroughputResult {
    const total = this.total;
    return {
      rps: this.durationS > 0 ? total / this.durationS : NaN,
      total,
      ok2xx: this.ok2xx,
      non2xx: this.non2xx,
      s4xx: this.s4xx,
      s5xx: this.s5xx,
      errors: this.errors,
      timeouts: this.timeouts,
      durationS: this.durationS,
      // autocannon's whole-ms percentiles: the median over the slices.
      p50: this.p50s.length ? latencyStats(this.p50s).p50 : NaN,
      p99: this.p99s.length ? latencyStats(this.p99s).p50 : NaN,
      cpuMsPerReq: Object.fromEntries(Object.entries(this.cpu).map(([k, v]) => [k, total > 0 ? v / total : NaN])),
    };
  }
}
