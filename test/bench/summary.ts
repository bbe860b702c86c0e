/**
 * The end of the bench: memory (RSS) per process, and one compact table mirroring issue 11's targets, each
 * with the target next to it and whether it was met.
 */
import { fmt, table, type Comparison, type ScenarioResult, type StreamComparison, type StreamScenarioResult } from './report.js';

export interface MemoryResult {
  readonly process: string;
  /** VmHWM: the highest resident set since the process started, MiB. */
  readonly peakMb: number;
  /** VmRSS at the end of the run, MiB. */
  readonly afterMb: number;
}

export function memoryTable(results: readonly MemoryResult[]): string {
  return table(['process', 'peak RSS MiB (VmHWM)', 'RSS after MiB'], results.map((m) => [m.process, fmt(m.peakMb, 1), fmt(m.afterMb, 1)]));
}

export interface TargetRow {
  readonly what: string;
  readonly gateway: number;
  readonly floor: number;
  readonly unit: string;
  /** The bound and its direction. */
  readonly limit: number;
  readonly atMost: boolean;
}

export const met = (r: TargetRow): boolean | null => (Number.isFinite(r.gateway) ? (r.atMost ? r.gateway <= r.limit : r.gateway >= r.limit) : null);

export interface SummaryInput {
  /** Suffix of the gateway rows the targets are judged on: 'credit' (the setting) or 'gateway'. */
  readonly gateway: 'credit' | 'gateway';
  readonly results: readonly ScenarioResult[];
  readonly comparisons: readonly Comparison[];
  readonly streams: readonly StreamScenarioResult[];
  readonly streamComparisons: readonly StreamComparison[];
  readonly memory: readonly MemoryResult[];
}

/** The targets, from whatever rows the run measured (a row that was not measured shows n/a). */
export function targetRows(s: SummaryInput): TargetRow[] {
  const unaryName = s.gateway === 'credit' ? 'gateway_credit' : 'gateway';
  const cmp = (num: string, den = 'bare') => s.comparisons.find((c) => c.num === num && c.den === den);
  const scmp = (num: string, den: string) => s.streamComparisons.find((c) => c.num === num && c.den === den);
  const row = (name: string) => s.results.find((r) => r.name === name);
  const stream = (name: string) => s.streams.find((r) => r.name === name);
  const gw = cmp(unaryName);
  const fl = cmp('floor');
  const rows: TargetRow[] = [
    { what: 'JSON c=1: added p50 over bare', gateway: gw?.addedP50Ms ?? NaN, floor: fl?.addedP50Ms ?? NaN, unit: 'ms', limit: 1.5, atMost: true },
    { what: 'JSON c=1: added p99 over bare', gateway: gw?.addedP99Ms ?? NaN, floor: fl?.addedP99Ms ?? NaN, unit: 'ms', limit: 4, atMost: true },
    { what: 'JSON c=16: req/s, % of bare', gateway: (gw?.rpsRatio ?? NaN) * 100, floor: (fl?.rpsRatio ?? NaN) * 100, unit: '%', limit: 25, atMost: false },
  ];
  for (const [suffix, shape] of [['', '0 ms'], ['_sliced', 'sliced']] as const) {
    const g = scmp(`${s.gateway}_stream${suffix}`, `bare_stream${suffix}`);
    const f = scmp(`floor_stream${suffix}`, `bare_stream${suffix}`);
    rows.push(
      { what: `stream c=1 (${shape}): first complete event, added p50`, gateway: g?.addedFirstEventP50Ms ?? NaN, floor: f?.addedFirstEventP50Ms ?? NaN, unit: 'ms', limit: 1.5, atMost: true },
      { what: `stream c=1 (${shape}): [DONE], added p50`, gateway: g?.addedDoneP50Ms ?? NaN, floor: f?.addedDoneP50Ms ?? NaN, unit: 'ms', limit: 2, atMost: true },
    );
  }
  const g = scmp(`${s.gateway}_stream`, 'bare_stream');
  const f = scmp('floor_stream', 'bare_stream');
  const loadRows = s.streams.filter((r) => r.load);
  const connections = loadRows[0]?.load?.connections;
  rows.push({
    what: `streams c=${connections ?? '?'}: streams/s, % of bare`,
    gateway: (g?.streamsPerSRatio ?? NaN) * 100,
    floor: (f?.streamsPerSRatio ?? NaN) * 100,
    unit: '%',
    limit: 90,
    atMost: false,
  });
  const gRow = row(unaryName);
  const fRow = row('floor');
  rows.push({
    what: 'sidecar CPU per JSON request (c=16 run)',
    gateway: gRow?.throughput.cpuMsPerReq.sidecar ?? NaN,
    floor: fRow?.throughput.cpuMsPerReq['null-sidecar'] ?? NaN,
    unit: 'ms',
    limit: 0.5,
    atMost: true,
  });
  const gs = stream(`${s.gateway}_stream`);
  const fs = stream('floor_stream');
  rows.push({
    what: `sidecar CPU per streamed event (c=${connections ?? '?'} run)`,
    gateway: gs?.load?.cpuMsPerEvent.sidecar ?? gs?.cpuMsPerEvent.sidecar ?? NaN,
    floor: fs?.load?.cpuMsPerEvent['null-sidecar'] ?? fs?.cpuMsPerEvent['null-sidecar'] ?? NaN,
    unit: 'ms',
    limit: 0.02,
    atMost: true,
  });
  const mem = (p: string) => s.memory.find((m) => m.process === p)?.peakMb ?? NaN;
  rows.push({
    what: 'sidecar peak RSS under the bench',
    gateway: mem(s.gateway === 'credit' ? 'sidecar(credit)' : 'sidecar'),
    floor: mem('null-sidecar'),
    unit: 'MiB',
    limit: 150,
    atMost: true,
  });
  return rows;
}

export function targetsTable(rows: readonly TargetRow[]): string {
  const v = (x: number, unit: string) => (Number.isFinite(x) ? `${fmt(x, unit === '%' ? 1 : unit === 'MiB' ? 0 : x !== 0 && Math.abs(x) < 0.1 ? 4 : 3)} ${unit}` : 'n/a');
  return table(
    ['target (issue 11)', 'gateway', 'floor', 'target', 'met'],
    rows.map((r) => {
      const m = met(r);
      return [r.what, v(r.gateway, r.unit), v(r.floor, r.unit), `${r.atMost ? '<=' : '>='} ${r.limit} ${r.unit}`, m === null ? 'n/a' : m ? 'met' : 'NOT met'];
    }),
  );
}
