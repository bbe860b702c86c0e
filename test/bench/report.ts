/**
 * Formatting for the benchmark: fixed-width tables, the ratio block and the
 * one-line JSON summary (`BENCH_JSON {...}`) that later runs can be diffed against.
 */
import { pairedMedianDiff, type LatencyStats } from './latency.js';

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
  /** num.rps - den.rps */
  readonly rpsDelta: number;
}

/** What went wrong in a streaming run: non-2xx, transport errors, 2xx streams that failed the check. */
export interface StreamFailures {
  readonly non2xx: number;
  readonly errors: number;
  readonly bad: number;
  readonly firstProblem: string | null;
}

export interface StreamScenarioResult extends StreamFailures {
  readonly name: string;
  readonly label: string;
  readonly loop: string;
  readonly tokens: number;
  readonly chunkDelayMs: number;
  /** The provider wrote the stream in uneven slices (`#sim:sliced`). */
  readonly sliced: boolean;
  readonly expectedEvents: number;
  /** Request written -> first body byte. */
  readonly ttfb: LatencyStats;
  /** Request written -> first complete, parseable `data: {...}` event. */
  readonly firstEvent: LatencyStats;
  /** Request written -> complete `data: [DONE]` event. */
  readonly done: LatencyStats;
  /** Request written -> last body byte. */
  readonly total: LatencyStats;
  /** (last byte - first byte) / (events - 1), per response. */
  readonly perChunk: LatencyStats;
  /** `data:` events per response (min / p50 / max). */
  readonly events: LatencyStats;
  /** Client socket reads per response (p50): below the event count means coalesced events. */
  readonly reads: LatencyStats;
  /** CPU ms per measured response during the sequential loop, by process. */
  readonly cpuMsPerResp: Record<string, number>;
  /** The same per `data:` event the client received (cpuMsPerResp / events p50). */
  readonly cpuMsPerEvent: Record<string, number>;
  /** Streams per second at `connections` concurrent clients (stream loop rows only). */
  readonly load?: StreamLoadResult;
  /** Each measured stream's request number and times, for paired comparisons (not in BENCH_JSON). */
  readonly bySeq?: { readonly seq: readonly number[]; readonly firstEventMs: readonly number[]; readonly doneMs: readonly number[] };
}

export interface StreamLoadResult extends StreamFailures {
  readonly connections: number;
  readonly durationS: number;
  /** Whole, checked streams. */
  readonly streams: number;
  readonly streamsPerS: number;
  readonly firstEvent: LatencyStats;
  readonly done: LatencyStats;
  readonly cpuMsPerStream: Record<string, number>;
  readonly cpuMsPerEvent: Record<string, number>;
}

export interface StreamComparison {
  readonly name: string;
  readonly what: string;
  readonly num: string;
  readonly den: string;
  readonly addedTtfbP50Ms: number;
  readonly addedTtfbP99Ms: number;
  readonly addedFirstEventP50Ms: number;
  readonly addedFirstEventP99Ms: number;
  readonly addedDoneP50Ms: number;
  readonly addedDoneP99Ms: number;
  /** Median over the streams both measured of (num − den) for the same request number (pairedMedianDiff); NaN without per-stream data. */
  readonly pairedFirstEventMs: number;
  readonly pairedDoneMs: number;
  /** Streams paired. */
  readonly pairs: number;
  /** num streams/s / den streams/s at the load's connections; NaN without a load run. */
  readonly streamsPerSRatio: number;
  readonly addedPerChunkP50Ms: number;
  readonly addedTotalP50Ms: number;
  readonly numEvents: number;
  readonly denEvents: number;
  /** CPU ms per response, all processes: num - den. */
  readonly addedCpuMsPerResp: number;
}

export interface RedisCallsResult {
  readonly scenario: string;
  readonly label: string;
  readonly requests: number;
  readonly windowMs: number;
  /** Command -> calls (INFO commandstats) during the requests plus a settle wait, and during an idle window as long. */
  readonly calls: Record<string, number>;
  readonly idleCalls: Record<string, number>;
  /** Same window, from MONITOR: commands sent by clients, and commands run inside Lua scripts. */
  readonly clientCalls: Record<string, number>;
  readonly scriptCalls: Record<string, number>;
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
    rpsDelta: a.throughput.rps - b.throughput.rps,
  };
}

export function comparisonBlock(c: Comparison): string {
  const added = c.name === 'gateway_vs_bare' ? 'gateway added' : `${c.num} added`;
  return [
    `${c.what}:`,
    `  p50 latency ratio  ${fmt(c.p50Ratio, 2)}x`,
    `  p99 latency ratio  ${fmt(c.p99Ratio, 2)}x`,
    `  req/s ratio        ${fmt(c.rpsRatio, 2)}x  (req/s ${c.num} - ${c.den} = ${fmt(c.rpsDelta, 1)})`,
    `  ${added} p50 = ${c.num}.p50 - ${c.den}.p50 = ${fmt(c.addedP50Ms)} ms`,
    `  ${added} p99 = ${c.num}.p99 - ${c.den}.p99 = ${fmt(c.addedP99Ms)} ms`,
  ].join('\n');
}

const sumValues = (r: Record<string, number>) => Object.values(r).reduce((a, b) => a + b, 0);

export function streamTable(results: readonly StreamScenarioResult[]): string {
  return table(
    ['target', 'n', 'events', 'reads p50', 'TTFB p50', '1st event p50', '1st event p99', '[DONE] p50', '[DONE] p99', 'per chunk p50', 'non-2xx', 'bad', 'errors'],
    results.map((r) => [
      r.label,
      String(r.ttfb.n),
      r.events.min === r.events.max ? fmt(r.events.p50, 0) : `${fmt(r.events.min, 0)}-${fmt(r.events.max, 0)}`,
      fmt(r.reads.p50, 0),
      fmt(r.ttfb.p50),
      fmt(r.firstEvent.p50),
      fmt(r.firstEvent.p99),
      fmt(r.done.p50),
      fmt(r.done.p99),
      fmt(r.perChunk.p50, 4),
      String(r.non2xx),
      String(r.bad),
      String(r.errors),
    ]),
  );
}

/** The sidecar a streaming row exercises: the floor's is the no-op one. */
const sidecarOf = (r: StreamScenarioResult): string => (r.name.startsWith('floor') ? 'null-sidecar' : 'sidecar');

export function streamCpuTable(results: readonly StreamScenarioResult[], processNames: readonly string[]): string {
  return table(
    ['target', ...processNames, 'total', 'sidecar/event', 'total/event'],
    results.map((r) => {
      const total = sumValues(r.cpuMsPerResp);
      return [r.label, ...processNames.map((n) => fmt(r.cpuMsPerResp[n] ?? NaN)), fmt(total), fmt(r.cpuMsPerEvent[sidecarOf(r)] ?? NaN, 4), fmt(total / r.events.p50, 4)];
    }),
  );
}

export function streamLoadTable(results: readonly StreamScenarioResult[]): string {
  const rows = results.filter((r) => r.load);
  return table(
    ['target', 'streams', 'streams/s', '1st event p50', '1st event p99', '[DONE] p50', '[DONE] p99', 'sidecar CPU/stream', 'sidecar CPU/event', 'all CPU/stream', 'non-2xx', 'bad', 'errors'],
    rows.map((r) => {
      const l = r.load!;
      return [
        r.label,
        String(l.streams),
        fmt(l.streamsPerS, 1),
        fmt(l.firstEvent.p50),
        fmt(l.firstEvent.p99),
        fmt(l.done.p50),
        fmt(l.done.p99),
        fmt(l.cpuMsPerStream[sidecarOf(r)] ?? NaN),
        fmt(l.cpuMsPerEvent[sidecarOf(r)] ?? NaN, 4),
        fmt(sumValues(l.cpuMsPerStream)),
        String(l.non2xx),
        String(l.bad),
        String(l.errors),
      ];
    }),
  );
}

export function compareStream(results: readonly StreamScenarioResult[], spec: { name: string; what: string; num: string; den: string }): StreamComparison | null {
  const a = results.find((r) => r.name === spec.num);
  const b = results.find((r) => r.name === spec.den);
  if (!a || !b) return null;
  return {
    ...spec,
    addedTtfbP50Ms: a.ttfb.p50 - b.ttfb.p50,
    addedTtfbP99Ms: a.ttfb.p99 - b.ttfb.p99,
    addedFirstEventP50Ms: a.firstEvent.p50 - b.firstEvent.p50,
    addedFirstEventP99Ms: a.firstEvent.p99 - b.firstEvent.p99,
    addedDoneP50Ms: a.done.p50 - b.done.p50,
    addedDoneP99Ms: a.done.p99 - b.done.p99,
    ...paired(a, b),
    streamsPerSRatio: a.load && b.load ? a.load.streamsPerS / b.load.streamsPerS : NaN,
    addedPerChunkP50Ms: a.perChunk.p50 - b.perChunk.p50,
    addedTotalP50Ms: a.total.p50 - b.total.p50,
    numEvents: a.events.p50,
    denEvents: b.events.p50,
    addedCpuMsPerResp: sumValues(a.cpuMsPerResp) - sumValues(b.cpuMsPerResp),
  };
}

/** The paired medians of two stream rows (the same request numbers: the same bodies). */
function paired(a: StreamScenarioResult, b: StreamScenarioResult): Pick<StreamComparison, 'pairedFirstEventMs' | 'pairedDoneMs' | 'pairs'> {
  if (!a.bySeq || !b.bySeq) return { pairedFirstEventMs: NaN, pairedDoneMs: NaN, pairs: 0 };
  const first = pairedMedianDiff({ seq: a.bySeq.seq, values: a.bySeq.firstEventMs }, { seq: b.bySeq.seq, values: b.bySeq.firstEventMs });
  const done = pairedMedianDiff({ seq: a.bySeq.seq, values: a.bySeq.doneMs }, { seq: b.bySeq.seq, values: b.bySeq.doneMs });
  return { pairedFirstEventMs: first.median, pairedDoneMs: done.median, pairs: Math.min(first.pairs, done.pairs) };
}

export function streamComparisonBlock(c: StreamComparison): string {
  return [
    `${c.what}:`,
    `  added first complete event p50 = ${c.num} - ${c.den} = ${fmt(c.addedFirstEventP50Ms)} ms`,
    `  added first complete event p99 = ${c.num} - ${c.den} = ${fmt(c.addedFirstEventP99Ms)} ms`,
    `  added [DONE] p50     = ${c.num} - ${c.den} = ${fmt(c.addedDoneP50Ms)} ms`,
    `  added [DONE] p99     = ${c.num} - ${c.den} = ${fmt(c.addedDoneP99Ms)} ms`,
    `  paired, median over ${c.pairs} streams of (${c.num} - ${c.den}) for the same request: first complete event ${fmt(c.pairedFirstEventMs)} ms, [DONE] ${fmt(c.pairedDoneMs)} ms`,
    `  added TTFB p50       = ${c.num}.ttfb.p50 - ${c.den}.ttfb.p50 = ${fmt(c.addedTtfbP50Ms)} ms`,
    `  added TTFB p99       = ${c.num}.ttfb.p99 - ${c.den}.ttfb.p99 = ${fmt(c.addedTtfbP99Ms)} ms`,
    `  added per chunk p50  = ${c.num}.per_chunk.p50 - ${c.den}.per_chunk.p50 = ${fmt(c.addedPerChunkP50Ms, 4)} ms`,
    `  added last byte p50  = ${fmt(c.addedTotalP50Ms)} ms`,
    `  added CPU/response   = ${fmt(c.addedCpuMsPerResp)} ms (all processes)`,
    ...(Number.isFinite(c.streamsPerSRatio) ? [`  streams/s ratio      = ${fmt(c.streamsPerSRatio, 3)}x (${fmt(c.streamsPerSRatio * 100, 1)} %)`] : []),
    `  data: events/response: ${c.num} ${fmt(c.numEvents, 0)}, ${c.den} ${fmt(c.denEvents, 0)}${c.numEvents === c.denEvents ? '' : '  (DIFFERENT: per-chunk times are not like for like)'}`,
  ].join('\n');
}

/**
 * One row per command, per gateway three columns: calls per request from
 * commandstats, and from MONITOR how many of them a client sent (round trips)
 * and how many ran inside scripts. Then the totals and the idle window.
 */
export function redisCallsTable(results: readonly RedisCallsResult[]): string {
  const cmds = [...new Set(results.flatMap((r) => [...Object.keys(r.calls), ...Object.keys(r.clientCalls), ...Object.keys(r.scriptCalls)]))].sort(
    (a, b) => Number(b.startsWith('eval')) - Number(a.startsWith('eval')) || a.localeCompare(b),
  );
  const head = ['command'];
  for (const r of results) head.push(`${r.label}: calls/req`, 'sent/req', 'in scripts/req');
  const per = (rec: Record<string, number>, c: string, r: RedisCallsResult) => fmt((rec[c] ?? 0) / r.requests, 3);
  const rows: string[][] = cmds.map((c) => [c, ...results.flatMap((r) => [per(r.calls, c, r), per(r.clientCalls, c, r), per(r.scriptCalls, c, r)])]);
  rows.push([
    'all',
    ...results.flatMap((r) => [fmt(sumValues(r.calls) / r.requests, 3), fmt(sumValues(r.clientCalls) / r.requests, 3), fmt(sumValues(r.scriptCalls) / r.requests, 3)]),
  ]);
  const lines = [table(head, rows)];
  for (const r of results) {
    const idle = Object.entries(r.idleCalls);
    lines.push(
      `${r.label}: ${r.requests} requests in ${fmt(r.windowMs, 0)} ms; round trips per request (commands sent by the sidecar, MONITOR) = ${fmt(sumValues(r.clientCalls) / r.requests, 3)}; ` +
        `idle window as long: ${idle.length ? idle.map(([k, v]) => `${k} ${v}`).join(', ') : 'no commands'}`,
    );
  }
  return lines.join('\n');
}

const round = (v: number, digits: number) => (Number.isFinite(v) ? Number(v.toFixed(digits)) : null);
const roundAll = (r: Record<string, number>, digits: number) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, round(v, digits)]));

/** Numbers rounded for the JSON line (non-finite -> null). */
const statsJson = (l: LatencyStats, digits = 4) => ({
  n: l.n,
  min: round(l.min, digits),
  mean: round(l.mean, digits),
  p50: round(l.p50, digits),
  p90: round(l.p90, digits),
  p99: round(l.p99, digits),
  max: round(l.max, digits),
});

export function jsonSummary(summary: {
  time: string;
  machine: Record<string, unknown>;
  params: Record<string, unknown>;
  results: readonly ScenarioResult[];
  comparisons: readonly Comparison[];
  streams?: readonly StreamScenarioResult[];
  streamComparisons?: readonly StreamComparison[];
  redis?: readonly RedisCallsResult[];
  /** Further top-level sections, already in their JSON shape. */
  extra?: Record<string, unknown>;
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
      rps_delta: round(c.rpsDelta, 1),
    };
  }
  const streams: Record<string, unknown> = {};
  for (const r of summary.streams ?? []) {
    streams[r.name] = {
      tokens: r.tokens,
      chunk_delay_ms: r.chunkDelayMs,
      events: { min: r.events.min, p50: r.events.p50, max: r.events.max, expected: r.expectedEvents },
      reads_p50: r.reads.p50,
      sliced: r.sliced,
      ttfb_ms: statsJson(r.ttfb),
      first_event_ms: statsJson(r.firstEvent),
      done_ms: statsJson(r.done),
      last_byte_ms: statsJson(r.total),
      per_chunk_ms: statsJson(r.perChunk, 5),
      non2xx: r.non2xx,
      bad: r.bad,
      errors: r.errors,
      cpu_ms_per_resp: roundAll(r.cpuMsPerResp, 4),
      cpu_ms_per_event: roundAll(r.cpuMsPerEvent, 5),
      load: r.load
        ? {
            connections: r.load.connections,
            duration_s: round(r.load.durationS, 2),
            streams: r.load.streams,
            streams_per_s: round(r.load.streamsPerS, 1),
            first_event_ms: statsJson(r.load.firstEvent),
            done_ms: statsJson(r.load.done),
            non2xx: r.load.non2xx,
            bad: r.load.bad,
            errors: r.load.errors,
            cpu_ms_per_stream: roundAll(r.load.cpuMsPerStream, 4),
            cpu_ms_per_event: roundAll(r.load.cpuMsPerEvent, 5),
          }
        : null,
    };
  }
  for (const c of summary.streamComparisons ?? []) {
    comparisons[c.name] = {
      added_ttfb_p50_ms: round(c.addedTtfbP50Ms, 4),
      added_ttfb_p99_ms: round(c.addedTtfbP99Ms, 4),
      added_first_event_p50_ms: round(c.addedFirstEventP50Ms, 4),
      added_first_event_p99_ms: round(c.addedFirstEventP99Ms, 4),
      added_done_p50_ms: round(c.addedDoneP50Ms, 4),
      added_done_p99_ms: round(c.addedDoneP99Ms, 4),
      paired_first_event_ms: round(c.pairedFirstEventMs, 4),
      paired_done_ms: round(c.pairedDoneMs, 4),
      pairs: c.pairs,
      streams_per_s_ratio: round(c.streamsPerSRatio, 3),
      added_per_chunk_p50_ms: round(c.addedPerChunkP50Ms, 5),
      added_last_byte_p50_ms: round(c.addedTotalP50Ms, 4),
      added_cpu_ms_per_resp: round(c.addedCpuMsPerResp, 4),
      events: { [c.num]: c.numEvents, [c.den]: c.denEvents },
    };
  }
  const redis: Record<string, unknown> = {};
  for (const r of summary.redis ?? []) {
    redis[r.scenario] = {
      requests: r.requests,
      calls_per_req: Object.fromEntries(Object.entries(r.calls).map(([k, v]) => [k, round(v / r.requests, 4)])),
      sent_per_req: Object.fromEntries(Object.entries(r.clientCalls).map(([k, v]) => [k, round(v / r.requests, 4)])),
      in_scripts_per_req: Object.fromEntries(Object.entries(r.scriptCalls).map(([k, v]) => [k, round(v / r.requests, 4)])),
      round_trips_per_req: round(sumValues(r.clientCalls) / r.requests, 4),
      idle_calls: r.idleCalls,
      window_ms: round(r.windowMs, 0),
    };
  }
  return `BENCH_JSON ${JSON.stringify({ time: summary.time, machine: summary.machine, params: summary.params, results, streams, comparisons, redis_calls: redis, ...summary.extra })}`;
}

/** A whole-number setting from the environment (its default when unset), at least `min`; anything else stops the script. */
export function envInteger(name: string, dflt: number, min = 1): number {
  const v = Number(process.env[name] ?? dflt);
  if (!Number.isInteger(v) || v < min) throw new Error(`${name} must be an integer of at least ${min}`);
  return v;
}
