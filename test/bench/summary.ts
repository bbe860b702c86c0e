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
  /** A latency added over bare Envoy: gateway minus floor is the gateway's own code, the bound minus the floor what the floor leaves it. */
  readonly added?: boolean;
}

/** What the gateway's code adds over the floor on a latency row (NaN on other rows). */
export const overFloor = (r: TargetRow): number => (r.added ? r.gateway - r.floor : NaN);

/**
 * What the floor leaves the gateway's code on a latency row: the bound minus the floor's own
 * added latency (NaN on other rows). At or below zero the floor alone misses the target.
 */
export const roomOverFloor = (r: TargetRow): number => (r.added ? r.limit - r.floor : NaN);

/** Issue 11's rate targets at 16 connections, % of bare Envoy's rate (the targets table and the cores' ceiling). */
export const JSON_RATE_TARGET = 25;
export const STREAM_RATE_TARGET = 90;

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
    { what: 'JSON c=1: added p50 over bare', gateway: gw?.addedP50Ms ?? NaN, floor: fl?.addedP50Ms ?? NaN, unit: 'ms', limit: 1.5, atMost: true, added: true },
    { what: 'JSON c=1: added p99 over bare', gateway: gw?.addedP99Ms ?? NaN, floor: fl?.addedP99Ms ?? NaN, unit: 'ms', limit: 4, atMost: true, added: true },
    { what: 'JSON c=16: req/s, % of bare', gateway: (gw?.rpsRatio ?? NaN) * 100, floor: (fl?.rpsRatio ?? NaN) * 100, unit: '%', limit: JSON_RATE_TARGET, atMost: false },
  ];
  // Unsliced streams are all alike: the difference of the two p50s. Sliced streams differ by
  // design (28 to 49 slices): each is compared with the same stream (same slicing) through
  // bare Envoy, and the median of those differences is the row.
  for (const [suffix, shape, paired] of [['', '0 ms', false], ['_sliced', 'sliced', true]] as const) {
    const g = scmp(`${s.gateway}_stream${suffix}`, `bare_stream${suffix}`);
    const f = scmp(`floor_stream${suffix}`, `bare_stream${suffix}`);
    const first = (c: StreamComparison | undefined) => (paired ? c?.pairedFirstEventMs : c?.addedFirstEventP50Ms) ?? NaN;
    const done = (c: StreamComparison | undefined) => (paired ? c?.pairedDoneMs : c?.addedDoneP50Ms) ?? NaN;
    const how = paired ? 'added, median per stream' : 'added p50';
    rows.push(
      { what: `stream c=1 (${shape}): first complete event, ${how}`, gateway: first(g), floor: first(f), unit: 'ms', limit: 1.5, atMost: true, added: true },
      { what: `stream c=1 (${shape}): [DONE], ${how}`, gateway: done(g), floor: done(f), unit: 'ms', limit: 2, atMost: true, added: true },
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
    limit: STREAM_RATE_TARGET,
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
  const blankUnlessAdded = (r: TargetRow, x: number) => (r.added ? v(x, r.unit) : '');
  return table(
    ['target (issue 11)', 'gateway', 'floor', 'target', 'met', 'gateway - floor', 'room the floor leaves'],
    rows.map((r) => {
      const m = met(r);
      return [
        r.what,
        v(r.gateway, r.unit),
        v(r.floor, r.unit),
        `${r.atMost ? '<=' : '>='} ${r.limit} ${r.unit}`,
        m === null ? 'n/a' : m ? 'met' : 'NOT met',
        blankUnlessAdded(r, overFloor(r)),
        blankUnlessAdded(r, roomOverFloor(r)),
      ];
    }),
  );
}

/**
 * What the box's cores allow at 16 connections: the cores divided by the CPU
 * every process of a row spent per request (or stream) in its load run,
 * load generator included, is the most that row could serve with every core
 * busy on that work and nothing else (kernel networking outside the processes
 * uncounted). A target above the floor's ceiling cannot be met on this box
 * by any sidecar code: the floor runs none.
 */
export interface CeilingRow {
  readonly what: string;
  readonly target: number;
  readonly floor: Ceiling;
  readonly gateway: Ceiling;
  /**
   * CPU ms per request the gateway's sidecar could spend and the row still reach
   * its target on these cores, the other processes (Envoy, provider, Redis, load
   * generator) costing what they did: cores * 1000 / (target * bare rate) minus
   * their CPU. Beside it, what the floor's do-nothing sidecar spends.
   */
  readonly sidecarBudgetMs: number;
  readonly nullSidecarMs: number;
}
export interface Ceiling {
  /** CPU ms per request (or stream), every process of the row together. */
  readonly cpuMs: number;
  /** cores * 1000 / cpuMs, as % of bare Envoy's measured rate. */
  readonly ceilingPct: number;
  /** The measured rate, as % of bare Envoy's. */
  readonly measuredPct: number;
}

const sumOf = (r: Record<string, number> | undefined): number =>
  r ? Object.values(r).reduce((a, b) => a + (Number.isFinite(b) ? b : 0), 0) : NaN;

export function ceilingRows(s: SummaryInput, cores: number): CeilingRow[] {
  const result = (name: string) => s.results.find((r) => r.name === name)?.throughput;
  const load = (name: string) => s.streams.find((r) => r.name === name)?.load ?? undefined;
  const ceiling = (cpuMs: number, rate: number, bareRate: number): Ceiling => ({
    cpuMs,
    ceilingPct: ((cores * 1000) / cpuMs / bareRate) * 100,
    measuredPct: (rate / bareRate) * 100,
  });
  const row = (what: string, target: number, bareRate: number, floor: { cpu?: Record<string, number>; rate?: number }, gateway: { cpu?: Record<string, number>; rate?: number }): CeilingRow => {
    const others = sumOf(gateway.cpu) - (gateway.cpu?.sidecar ?? NaN);
    return {
      what,
      target,
      floor: ceiling(sumOf(floor.cpu), floor.rate ?? NaN, bareRate),
      gateway: ceiling(sumOf(gateway.cpu), gateway.rate ?? NaN, bareRate),
      sidecarBudgetMs: (cores * 1000) / ((target / 100) * bareRate) - others,
      nullSidecarMs: floor.cpu?.['null-sidecar'] ?? NaN,
    };
  };
  const json = (name: string) => ({ cpu: result(name)?.cpuMsPerReq, rate: result(name)?.rps });
  const streams = (name: string) => ({ cpu: load(name)?.cpuMsPerStream, rate: load(name)?.streamsPerS });
  return [
    row('JSON c=16: req/s, % of bare', JSON_RATE_TARGET, result('bare')?.rps ?? NaN, json('floor'), json(s.gateway === 'credit' ? 'gateway_credit' : 'gateway')),
    row('streams c=16: streams/s, % of bare', STREAM_RATE_TARGET, load('bare_stream')?.streamsPerS ?? NaN, streams('floor_stream'), streams(`${s.gateway}_stream`)),
  ];
}

export function ceilingTable(rows: readonly CeilingRow[]): string {
  const pct = (x: number) => (Number.isFinite(x) ? `${fmt(x, 1)} %` : 'n/a');
  const ms = (x: number) => (Number.isFinite(x) ? `${fmt(x, 3)} ms` : 'n/a');
  return table(
    ['row', 'floor: CPU per req', 'floor: ceiling', 'floor: measured', 'gateway: CPU per req', 'gateway: ceiling', 'gateway: measured', 'target', 'floor can reach it', "gateway's sidecar budget (null sidecar)"],
    rows.map((r) => [
      r.what,
      ms(r.floor.cpuMs),
      pct(r.floor.ceilingPct),
      pct(r.floor.measuredPct),
      ms(r.gateway.cpuMs),
      pct(r.gateway.ceilingPct),
      pct(r.gateway.measuredPct),
      `>= ${r.target} %`,
      Number.isFinite(r.floor.ceilingPct) ? (r.floor.ceilingPct >= r.target ? 'yes' : 'no') : 'n/a',
      `${ms(r.sidecarBudgetMs)} (${ms(r.nullSidecarMs)})`,
    ]),
  );
}
