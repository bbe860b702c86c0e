/**
 * Formatting for the benchmark: fixed-width tables, the ratio block and the
 * one-line JSON summary (`BENCH_JSON {...}`) that later runs can be diffed against.
 */
import type { LatencyStats } from './latency.js';

export interface LatencyResult extends LatencyStats {
  readonly non2xx: number;
  readonly errors: number;
  readonly firstProblem: string | null;
}

export interface ThroughputResult {
  /** Responses per second (all statuses) over the measured run. */
  readonly rps: number;
  readonly total: number;
  readonly ok2xx: number;
  readonly non2xx: number;
  readonly s4xx: number;
  readonly s5xx: number;
  readonly errors: number;
  readonly timeouts: number;
  readonly durationS: number;
  /** autocannon's latency percentiles (whole ms, 2xx only). */
  readonly p50: number;
  readonly p99: number;
  /** CPU time per response during the run, by process name (ms). */
  readonly cpuMsPerReq: Record<string, number>;
}

export interface ScenarioResult {
  readonly name: string;
  readonly label: string;
  readonly latency: LatencyResult;
  readonly throughput: ThroughputResult;
}

export interface Comparison {
  readonly name: string;
  readonly what: string;
  readonly num: string;
  readonly den: string;
  readonly p50Ratio: number;
  readonly p99Ratio: number;
  readonly rpsRatio: number;
  readonly addedP50Ms: number;
  readonly addedP99Ms: number;
}

export const fmt = (v: number, digits = 3): string => (Number.isFinite(v) ? v.toFixed(digits) : 'n/a');

export function table(head: readonly string[], rows: ReadonlyArray<readonly string[]>, leftCols = 1): string {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (i < leftCols ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  const rule = widths.map((w) => '-'.repeat(w)).join('  ');
  return [line(head), rule, ...rows.map(line)].join('\n');
}

export function latencyTable(results: readonly ScenarioResult[]): string {
  return table(
    ['target', 'n', 'min ms', 'mean ms', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'non-2xx', 'errors'],
    results.map((r) => {
      const l = r.latency;
      return [r.label, String(l.n), fmt(l.min), fmt(l.mean), fmt(l.p50), fmt(l.p90), fmt(l.p99), fmt(l.max), String(l.non2xx), String(l.errors)];
    }),
  );
}

export function throughputTable(results: readonly ScenarioResult[]): string {
  return table(
    ['target', 'req/s', 'responses', 'p50 ms*', 'p99 ms*', 'non-2xx', '4xx', '5xx', 'errors', 'timeouts'],
    results.map((r) => {
      const t = r.throughput;
      return [
        r.label,
        fmt(t.rps, 1),
        String(t.total),
        fmt(t.p50, 0),
        fmt(t.p99, 0),
        String(t.non2xx),
        String(t.s4xx),
        String(t.s5xx),
        String(t.errors),
        String(t.timeouts),
      ];
    }),
  );
}

export function cpuTable(results: readonly ScenarioResult[], processNames: readonly string[]): string {
  const cols = [...processNames, 'total'];
  return table(
    ['target', ...cols],
    results.map((r) => {
      const c = r.throughput.cpuMsPerReq;
      const total = Object.values(c).reduce((a, b) => a + b, 0);
      return [r.label, ...processNames.map((n) => fmt(c[n] ?? NaN)), fmt(total)];
    }),
  );
}

export function compare(results: readonly ScenarioResult[], spec: { name: string; what: string; num: string; den: string }): Comparison | null {
  const a = results.find((r) => r.name === spec.num);
  const b = results.find((r) => r.name === spec.den);
  if (!a || !b) return null;
  return {
    ...spec,
    p50Ratio: a.latency.p50 / b.latency.p50,
    p99Ratio: a.latency.p99 / b.latency.p99,
    rpsRatio: a.throughput.rps / b.throughput.rps,
    addedP50Ms: a.latency.p50 - b.latency.p50,
    addedP99Ms: a.latency.p99 - b.latency.p99,
  };
}

export function comparisonBlock(c: Comparison): string {
  const added = c.name === 'gateway_vs_bare' ? 'gateway added' : `${c.num} added`;
  return [
    `${c.what}:`,
    `  p50 latency ratio  ${fmt(c.p50Ratio, 2)}x`,
    `  p99 latency ratio  ${fmt(c.p99Ratio, 2)}x`,
    `  req/s ratio        ${fmt(c.rpsRatio, 2)}x`,
    `  ${added} p50 = ${c.num}.p50 - ${c.den}.p50 = ${fmt(c.addedP50Ms)} ms`,
    `  ${added} p99 = ${c.num}.p99 - ${c.den}.p99 = ${fmt(c.addedP99Ms)} ms`,
  ].join('\n');
}

const round = (v: number, digits: number) => (Number.isFinite(v) ? Number(v.toFixed(digits)) : null);

/** Numbers rounded for the JSON line (non-finite -> null). */
export function jsonSummary(summary: {
  time: string;
  machine: Record<string, unknown>;
  params: Record<string, unknown>;
  results: readonly ScenarioResult[];
  comparisons: readonly Comparison[];
}): string {
  const results: Record<string, unknown> = {};
  for (const r of summary.results) {
    const l = r.latency;
    const t = r.throughput;
    results[r.name] = {
      latency_ms: { n: l.n, min: round(l.min, 4), mean: round(l.mean, 4), p50: round(l.p50, 4), p90: round(l.p90, 4), p99: round(l.p99, 4), max: round(l.max, 4) },
      latency_non2xx: l.non2xx,
      latency_errors: l.errors,
      rps: round(t.rps, 1),
      throughput_responses: t.total,
      throughput_non2xx: t.non2xx,
      throughput_4xx: t.s4xx,
      throughput_5xx: t.s5xx,
      throughput_errors: t.errors,
      throughput_timeouts: t.timeouts,
      autocannon_p50_ms: t.p50,
      autocannon_p99_ms: t.p99,
      cpu_ms_per_req: Object.fromEntries(Object.entries(t.cpuMsPerReq).map(([k, v]) => [k, round(v, 4)])),
    };
  }
  const comparisons: Record<string, unknown> = {};
  for (const c of summary.comparisons) {
    comparisons[c.name] = {
      p50_ratio: round(c.p50Ratio, 3),
      p99_ratio: round(c.p99Ratio, 3),
      rps_ratio: round(c.rpsRatio, 3),
      added_p50_ms: round(c.addedP50Ms, 4),
      added_p99_ms: round(c.addedP99Ms, 4),
    };
  }
  return `BENCH_JSON ${JSON.stringify({ time: summary.time, machine: summary.machine, params: summary.params, results, comparisons })}`;
}
