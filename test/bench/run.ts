/**
 * `npm run bench`: chat completions, in ONE run, against
 *   (a) the upstream simulator directly,
 *   (b) Envoy with only the router filter (same listener/route/cluster shape),
 *   (f) the floor: the gateway's Envoy config against a no-op sidecar,
 *   (c) the full gateway (memory store),
 *   (c') the full gateway on the redis store, credit check off,
 *   (d) the full gateway on the redis store, credit check on (the issue 11 setting),
 * non-streaming (a..d) and streaming (b, f, c, d), then the comparisons.
 *
 * Unary latency comes from a sequential keep-alive client with hrtime timing
 * (latency.ts, sub-ms resolution), interleaved in rounds across the targets;
 * throughput from autocannon at BENCH_CONNECTIONS, in rounds across the
 * targets too (BENCH_LOAD_ROUNDS slices of BENCH_SECONDS / rounds each).
 * Streaming, in three shapes (chunks 0 ms apart; paced 5 ms apart; sliced:
 * the provider writes 1 to 500-byte slices 1 ms apart, `#sim:sliced`): a
 * sequential keep-alive client timing the first body byte, the first complete
 * event an SDK can parse, the complete `data: [DONE]` and the last byte,
 * interleaved the same way, with CPU per response and per event from /proc;
 * then streams per second at BENCH_CONNECTIONS concurrent streaming clients
 * that read and check every stream to its end (stream-load.ts). Messages per
 * request from the floor's and the gateways' Envoy admin /stats (ext_authz,
 * ext_proc, gRPC calls to the sidecar); Redis commands per request of the
 * redis-store gateways from INFO commandstats; peak and final RSS of every
 * process; last, a table of issue 11's targets, met or not.
 *
 * Environment:
 *   BENCH_SECONDS        autocannon run and streams/s run per target, seconds (default 5)
 *   BENCH_CONNECTIONS    connections of both (default 16)
 *   BENCH_REQUESTS       sequential latency requests per unary target (default 2000)
 *   BENCH_STREAM_REQUESTS sequential streamed requests per streaming target, chunks 0 ms apart (default 300)
 *   BENCH_STREAM_PACED_REQUESTS the same for the paced streaming targets, chunks 5 ms apart
 *                        (default max(20, STREAM_REQUESTS/3); 0 leaves the paced rows out)
 *   BENCH_STREAM_SLICED_REQUESTS the same for the sliced streaming targets
 *                        (default max(20, STREAM_REQUESTS/3); 0 leaves the sliced rows out)
 *   BENCH_ROUNDS         interleaved rounds the latency requests are split into (default 5)
 *   BENCH_LOAD_ROUNDS    interleaved rounds the req/s and streams/s runs are split into (default 5;
 *                        1 = each target's whole run back-to-back, as before 2026-11-28)
 *   BENCH_WARMUP         sequential warm-up requests per unary target, in interleaved rounds as the
 *                        measured ones (default 2500: V8 still compiles the sidecar's, the simulator's
 *                        and this process's code for the first 2,000-3,000 chats at one connection,
 *                        even after the load warm-up, and the compiler threads take the CPUs from the
 *                        chats measured then: test/bench/jit-settle.ts, docs/benchmark.md session 27).
 *   BENCH_STREAM_WARMUP  warm-up streams per 0 ms streaming target, interleaved (default BENCH_STREAM_REQUESTS);
 *                        the paced and sliced ones (same code, measured after them) warm up with
 *                        min(50, max(5, n/10)) of their own
 *   BENCH_WARMUP_SECONDS autocannon / streams/s warm-up per target before its first slice (default 1)
 *   BENCH_LOAD_WARMUP_SECONDS before anything is measured, every target (bare Envoy and the floor too)
 *                        under load at BENCH_CONNECTIONS for this long, so the sidecars' code is
 *                        optimized by V8 as in a gateway in service (warm-up.ts; default 5; 0 = none,
 *                        the runs before 2026-11-28 session 21)
 *   BENCH_SCENARIOS      comma-separated subset of scenario names (default all; see scenarios.ts).
 *                        The redis/credit gateways are only started when a selected scenario needs them.
 *   BENCH_COLD_SAMPLES   samples per pause of the box's wake-up measure (cold-cpu.ts; default 200)
 *   BENCH_ECHO=1         echo the processes' output
 *   BENCH_SIDECAR_NODE_ARGS='--flag ...' more Node/V8 flags for every gateway's sidecar (after its
 *                        heap flags; not the floor's): what a setting changes, measured in the full bench
 *
 * Ends with one `BENCH_JSON {...}` line for comparing runs.
 */
import os from 'node:os';
import autocannon from 'autocannon';
import {
  SequentialClient,
  StreamClient,
  emptySample,
  emptyStreamSample,
  latencyStats,
  type LatencySample,
  type StreamSample,
} from './latency.js';
import { messageProbe, messagesJson, messagesTable, type MessageCounts } from './messages.js';
import { autocannonOptions, LOAD_WARMUP_SECONDS, warmUnderLoad } from './warm-up.js';
import { addCpu, cpuSnapshot, procMemMb } from './proc.js';
import { interleaved, loadRounds, ThroughputTally } from './rounds.js';
import { streamLoad } from './stream-load.js';
import { ceilingRows, ceilingTable, memoryTable, targetRows, targetsTable, met, overFloor, roomOverFloor, type MemoryResult } from './summary.js';
import { coldCpuTable, measureColdCpu } from './cold-cpu.js';
import { diffCalls, type CommandCalls, type MonitoredCalls } from './redis-stats.js';
import {
  comparisonBlock,
  compare,
  fmt,
  compareStream,
  cpuTable,
  jsonSummary,
  latencyTable,
  redisCallsTable,
  streamComparisonBlock,
  streamCpuTable,
  streamLoadTable,
  streamTable,
  throughputTable,
  type Comparison,
  type RedisCallsResult,
  type ScenarioResult,
  type StreamComparison,
  type StreamLoadResult,
  type StreamScenarioResult,
  type ThroughputResult,
} from './report.js';
import {
  COMPARISONS,
  PACED_DELAY_MS,
  PACED_TOKENS,
  SCENARIOS,
  SLICED_TOKENS,
  STREAM_COMPARISONS,
  STREAM_TOKENS,
  USER_MESSAGE,
  streamMessage,
  type Scenario,
  type StreamLoop,
  type StreamScenario,
  type UnaryScenario,
} from './scenarios.js';
import {
  GATEWAY_VARIANTS,
  installCleanupHandlers,
  interrupted,
  reapChildren,
  removeBenchRoot,
  startTargets,
  stopTargets,
  type GatewayVariant,
  type Targets,
} from './targets.js';

/** Sequential requests per scenario for counting the gRPC messages per request. */
const MESSAGE_PROBE_REQUESTS = 20;
/** Requests per redis-store gateway for counting Redis commands per request. */
const REDIS_PROBE_REQUESTS = 200;
/** Wait after the last probe request, so its settlement (written after the response) is counted. */
const REDIS_SETTLE_WAIT_MS = 150;

function envInt(name: string, fallback: number, min = 1): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const v = Number(raw);
  if (!Number.isInteger(v) || v < min) throw new Error(`${name} must be an integer >= ${min}, got ${JSON.stringify(raw)}`);
  return v;
}

function envNum(name: string, fallback: number, min = 0): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const v = Number(raw);
  if (!Number.isFinite(v) || v < min) throw new Error(`${name} must be a number >= ${min}, got ${JSON.stringify(raw)}`);
  return v;
}

interface Params {
  readonly seconds: number;
  readonly connections: number;
  readonly requests: number;
  readonly streamRequests: number;
  readonly pacedRequests: number;
  readonly slicedRequests: number;
  readonly rounds: number;
  /** Rounds the load phases (req/s, streams/s) are split into (loadRounds). */
  readonly loadRounds: number;
  readonly warmup: number;
  readonly streamWarmup: number;
  readonly warmupSeconds: number;
  /** Load per target before the first measurement (warm-up.ts). */
  readonly loadWarmupSeconds: number;
  readonly scenarios: readonly string[];
  /** Samples per pause of the wake-up measure (cold-cpu.ts). */
  readonly coldSamples: number;
}

function readParams(): Params {
  const requests = envInt('BENCH_REQUESTS', 2000);
  const streamRequests = envInt('BENCH_STREAM_REQUESTS', 300);
  const pacedRequests = envInt('BENCH_STREAM_PACED_REQUESTS', Math.max(20, Math.ceil(streamRequests / 3)), 0);
  const slicedRequests = envInt('BENCH_STREAM_SLICED_REQUESTS', Math.max(20, Math.ceil(streamRequests / 3)), 0);
  const names = (process.env.BENCH_SCENARIOS ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  for (const n of names) if (!SCENARIOS.some((s) => s.name === n)) throw new Error(`BENCH_SCENARIOS: unknown scenario ${n} (have ${SCENARIOS.map((s) => s.name).join(', ')})`);
  const off: Array<[StreamLoop, string]> = [];
  if (pacedRequests === 0) off.push(['paced', 'BENCH_STREAM_PACED_REQUESTS']);
  if (slicedRequests === 0) off.push(['sliced', 'BENCH_STREAM_SLICED_REQUESTS']);
  for (const [loop, knob] of off) {
    const named = names.filter((n) => SCENARIOS.some((s) => s.name === n && s.kind === 'stream' && s.loop === loop));
    if (named.length) throw new Error(`BENCH_SCENARIOS names ${named.join(', ')} but ${knob} is 0`);
  }
  const all = SCENARIOS.filter((s) => s.kind !== 'stream' || !off.some(([loop]) => loop === s.loop)).map((s) => s.name);
  return {
    seconds: envNum('BENCH_SECONDS', 5, 0.1),
    connections: envInt('BENCH_CONNECTIONS', 16),
    requests,
    streamRequests,
    pacedRequests,
    slicedRequests,
    rounds: envInt('BENCH_ROUNDS', 5),
    loadRounds: envInt('BENCH_LOAD_ROUNDS', 5),
    warmup: envInt('BENCH_WARMUP', 2500, 0),
    streamWarmup: envInt('BENCH_STREAM_WARMUP', streamRequests, 0),
    warmupSeconds: envNum('BENCH_WARMUP_SECONDS', 1, 0),
    loadWarmupSeconds: envNum('BENCH_LOAD_WARMUP_SECONDS', LOAD_WARMUP_SECONDS, 0),
    scenarios: names.length ? names : all,
    coldSamples: envInt('BENCH_COLD_SAMPLES', 200, 50),
  };
}

// ---- phases ----

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function smokeCheck(t: Targets, scenarios: readonly Scenario[]): Promise<void> {
  for (const s of scenarios) {
    const client = new SequentialClient(s.request(t));
    try {
      const r = await client.one();
      const problem = s.check(r.status, r.body);
      if (problem) throw new Error(`${s.label}: smoke request failed: ${problem}`);
    } finally {
      client.close();
    }
  }
}

async function latencyPhase(t: Targets, scenarios: readonly UnaryScenario[], p: Params): Promise<Map<string, LatencySample>> {
  const clients = new Map(scenarios.map((s) => [s.name, new SequentialClient(s.request(t))]));
  const samples = new Map(scenarios.map((s) => [s.name, emptySample()]));
  try {
    await interleaved(
      scenarios.map((s) => (n: number) => clients.get(s.name)!.run(n, emptySample())),
      p.warmup,
      p.rounds,
    );
    await interleaved(
      scenarios.map((s) => (n: number) => clients.get(s.name)!.run(n, samples.get(s.name)!)),
      p.requests,
      p.rounds,
    );
  } finally {
    for (const c of clients.values()) c.close();
  }
  return samples;
}

/** Sequential streamed requests, interleaved; CPU of the scenario's processes summed over its own runs. */
async function streamPhase(
  t: Targets,
  scenarios: readonly StreamScenario[],
  requests: number,
  p: Params,
  warmup = Math.min(50, Math.max(5, Math.ceil(requests / 10))),
): Promise<Map<string, StreamSample>> {
  const clients = new Map(scenarios.map((s) => [s.name, new StreamClient(s.request(t), s.checkEach)]));
  const samples = new Map(scenarios.map((s) => [s.name, emptyStreamSample()]));
  try {
    await interleaved(
      scenarios.map((s) => (n: number) => clients.get(s.name)!.run(n)),
      warmup,
      p.rounds,
    );
    await interleaved(
      scenarios.map((s) => async (n: number) => {
        const sample = samples.get(s.name)!;
        const pids = t.pids(s.gateway);
        const before = cpuSnapshot(pids);
        await clients.get(s.name)!.run(n, sample);
        addCpu(sample.cpuMs, before, cpuSnapshot(pids));
      }),
      requests,
      p.rounds,
    );
  } finally {
    for (const c of clients.values()) c.close();
  }
  return samples;
}

function streamResult(s: StreamScenario, sample: StreamSample, load: StreamLoadResult | undefined): StreamScenarioResult {
  const n = sample.ttfbMs.length;
  const events = latencyStats(sample.events);
  const cpuMsPerResp = Object.fromEntries(Object.entries(sample.cpuMs).map(([k, v]) => [k, n > 0 ? v / n : NaN]));
  return {
    name: s.name,
    label: s.label,
    loop: s.loop,
    tokens: s.tokens,
    chunkDelayMs: s.chunkDelayMs,
    sliced: s.sliced,
    expectedEvents: s.expectedEvents,
    ttfb: latencyStats(sample.ttfbMs),
    firstEvent: latencyStats(sample.firstEventMs),
    done: latencyStats(sample.doneMs),
    total: latencyStats(sample.totalMs),
    perChunk: latencyStats(sample.perChunkMs),
    events,
    reads: latencyStats(sample.reads),
    bySeq: { seq: sample.seq, firstEventMs: sample.firstEventMs, doneMs: sample.doneMs },
    non2xx: sample.non2xx,
    errors: sample.errors,
    bad: sample.bad,
    firstProblem: sample.firstProblem,
    // Per measured response; the few non-measured ones (failures) are in the CPU too, they make it an upper bound.
    cpuMsPerResp,
    cpuMsPerEvent: Object.fromEntries(Object.entries(cpuMsPerResp).map(([k, v]) => [k, v / events.p50])),
    load,
  };
}

/**
 * Streams per second of the streaming rows at p.connections (loadRounds);
 * CPU by process over the measured slices, per whole stream and per `data:`
 * event received.
 */
async function streamLoadRuns(t: Targets, scenarios: readonly StreamScenario[], p: Params): Promise<Map<string, StreamLoadResult>> {
  const runs = scenarios.map((s) => ({ s, req: s.request(t), pids: t.pids(s.gateway), sample: emptyStreamSample(), durationS: 0, cpu: {} as Record<string, number> }));
  for (const r of runs) await warmUnderLoad(r.req, p.connections, p.warmupSeconds, r.s.checkEach);
  await loadRounds(
    runs.map((r) => async (seconds: number) => {
      const before = cpuSnapshot(r.pids);
      r.durationS += (await streamLoad(r.req, r.s.checkEach, p.connections, seconds, r.sample)).durationS;
      addCpu(r.cpu, before, cpuSnapshot(r.pids));
    }),
    p.seconds,
    p.loadRounds,
  );
  const out = new Map<string, StreamLoadResult>();
  for (const { s, sample, durationS, cpu } of runs) {
    const streams = sample.doneMs.length;
    const events = streams * (latencyStats(sample.events).p50 || s.expectedEvents);
    out.set(s.name, {
      connections: p.connections,
      durationS,
      streams,
      streamsPerS: durationS > 0 ? streams / durationS : NaN,
      firstEvent: latencyStats(sample.firstEventMs),
      done: latencyStats(sample.doneMs),
      non2xx: sample.non2xx,
      bad: sample.bad,
      errors: sample.errors,
      firstProblem: sample.firstProblem,
      cpuMsPerStream: Object.fromEntries(Object.entries(cpu).map(([k, v]) => [k, streams > 0 ? v / streams : NaN])),
      cpuMsPerEvent: Object.fromEntries(Object.entries(cpu).map(([k, v]) => [k, events > 0 ? v / events : NaN])),
    });
  }
  return out;
}

/** Peak (VmHWM) and current RSS of every process of the run, gateway variants' under `name(variant)`. */
function memoryOf(t: Targets): MemoryResult[] {
  const all: Array<[string, number | undefined]> = Object.entries(t.pids());
  for (const v of t.variants) {
    for (const [name, pid] of Object.entries(v.pids())) if (name !== 'envoy-bare') all.push([`${name}(${v.name})`, pid]);
  }
  return all.map(([name, pid]) => {
    const m = procMemMb(pid);
    return { process: name, peakMb: m.peak, afterMb: m.rss };
  });
}

/**
 * Redis commands per request of one redis-store gateway: INFO commandstats
 * before and after REDIS_PROBE_REQUESTS sequential requests (plus a short wait
 * for the last settlement), then over an idle window as long (background
 * work: reaper, journal retry), which the per-request figures still contain.
 */
async function redisProbe(t: Targets, s: UnaryScenario, variant: GatewayVariant): Promise<RedisCallsResult & { failures: number; firstProblem: string | null }> {
  const probe = t.variant(variant).redis;
  const client = new SequentialClient(s.request(t));
  const sample = emptySample();
  let calls: CommandCalls;
  let idle: CommandCalls;
  let monitored: MonitoredCalls;
  let windowMs: number;
  try {
    await client.run(5); // connection up, key cached
    await sleep(REDIS_SETTLE_WAIT_MS);
    const monitor = await probe.monitor();
    const before = await probe.commandCalls();
    const t0 = performance.now();
    await client.run(REDIS_PROBE_REQUESTS, sample);
    await sleep(REDIS_SETTLE_WAIT_MS);
    const after = await probe.commandCalls();
    windowMs = performance.now() - t0;
    monitored = await monitor.stop();
    calls = diffCalls(before, after);
    const idleBefore = await probe.commandCalls();
    await sleep(windowMs);
    idle = diffCalls(idleBefore, await probe.commandCalls());
  } finally {
    client.close();
  }
  return {
    scenario: s.name,
    label: s.label,
    requests: REDIS_PROBE_REQUESTS,
    windowMs,
    calls: Object.fromEntries(calls),
    idleCalls: Object.fromEntries(idle),
    clientCalls: Object.fromEntries(monitored.client),
    scriptCalls: Object.fromEntries(monitored.script),
    failures: sample.non2xx + sample.errors,
    firstProblem: sample.firstProblem,
  };
}

/** Requests per second of the unary rows at p.connections (loadRounds), with CPU by process per response. */
async function throughputRuns(t: Targets, scenarios: readonly UnaryScenario[], p: Params): Promise<Map<string, ThroughputResult>> {
  const runs = scenarios.map((s) => {
    const req = s.request(t);
    return { s, req, opts: autocannonOptions(req, p.connections), pids: t.pids(s.gateway), tally: new ThroughputTally() };
  });
  for (const r of runs) await warmUnderLoad(r.req, p.connections, p.warmupSeconds);
  await loadRounds(
    runs.map((r) => async (seconds: number) => {
      const before = cpuSnapshot(r.pids);
      const result = await autocannon({ ...r.opts, duration: seconds });
      addCpu(r.tally.cpu, before, cpuSnapshot(r.pids));
      r.tally.add(result);
    }),
    p.seconds,
    p.loadRounds,
  );
  return new Map(runs.map((r) => [r.s.name, r.tally.result()]));
}

// ---- main ----

async function main(): Promise<number> {
  const p = readParams();
  const scenarios = SCENARIOS.filter((s) => p.scenarios.includes(s.name));
  const unary = scenarios.filter((s): s is UnaryScenario => s.kind === 'unary');
  const streams = scenarios.filter((s): s is StreamScenario => s.kind === 'stream' && s.loop === 'stream');
  const paced = scenarios.filter((s): s is StreamScenario => s.kind === 'stream' && s.loop === 'paced');
  const sliced = scenarios.filter((s): s is StreamScenario => s.kind === 'stream' && s.loop === 'sliced');
  const variants = [...new Set(scenarios.flatMap((s) => (s.gateway ? [s.gateway] : [])))];
  const cpus = os.cpus();
  const machine = {
    cpus: cpus.length,
    cpu_model: cpus[0]?.model ?? 'unknown',
    mem_gb: Number((os.totalmem() / 2 ** 30).toFixed(1)),
    platform: `${os.platform()} ${os.release()} ${os.arch()}`,
    loadavg_at_start: os.loadavg().map((v) => Number(v.toFixed(2))),
    node: process.version,
  };

  // Measured first, on a quiet box: how much slower work runs after a pause (every hop at c=1 starts after one).
  const cold = await measureColdCpu(p.coldSamples);

  // Stay installed to the end: a Ctrl-C during the final cleanup must not kill this process half-way.
  installCleanupHandlers();
  let targets: Targets;
  try {
    process.stdout.write(
      `bench: starting simulator, account service, sidecar, gateway Envoy and bare Envoy${variants.length ? `, then the ${variants.join(' and ')} gateway(s) with redis-server` : ''}...\n`,
    );
    targets = await startTargets({ echo: process.env.BENCH_ECHO === '1', variants });
  } catch (err) {
    if (!interrupted()) await stopTargets();
    throw err;
  }

  let exitCode = 0;
  try {
    const params = {
      seconds: p.seconds,
      connections: p.connections,
      requests: p.requests,
      stream_requests: p.streamRequests,
      stream_paced_requests: p.pacedRequests,
      stream_sliced_requests: p.slicedRequests,
      stream_tokens: STREAM_TOKENS,
      stream_paced: { tokens: PACED_TOKENS, chunk_delay_ms: PACED_DELAY_MS },
      stream_sliced: { tokens: SLICED_TOKENS, slice_bytes: '1-500', slice_gap_ms: 1 },
      message_probe_requests: MESSAGE_PROBE_REQUESTS,
      redis_probe_requests: REDIS_PROBE_REQUESTS,
      rounds: p.rounds,
      load_rounds: p.loadRounds,
      warmup: p.warmup,
      stream_warmup: p.streamWarmup,
      warmup_seconds: p.warmupSeconds,
      load_warmup_seconds: p.loadWarmupSeconds,
      scenarios: p.scenarios,
      envoy_concurrency: targets.envoyConcurrency,
      message: USER_MESSAGE,
    };
    const out: string[] = [];
    out.push('');
    out.push('== Inference gateway benchmark: POST /v1/chat/completions, non-streaming and streaming ==');
    out.push(`machine : ${machine.cpus} x ${machine.cpu_model}, ${machine.mem_gb} GiB, ${machine.platform}, load avg ${machine.loadavg_at_start.join(' ')}`);
    out.push(`node    : ${machine.node}`);
    out.push(`envoy   : ${targets.envoyVersion} (${targets.envoyBin}), --concurrency ${targets.envoyConcurrency} for every Envoy`);
    out.push(
      `warm-up : ${p.loadWarmupSeconds > 0 ? `every target under load first, ${p.connections} connections x ${p.loadWarmupSeconds} s (the sidecars' code optimized, as in service)` : 'none under load (BENCH_LOAD_WARMUP_SECONDS=0)'}\n` +
        `params  : latency = ${p.requests} sequential requests/target on 1 keep-alive connection, ${p.rounds} interleaved rounds, ${p.warmup} warm-up requests; ` +
        `throughput = autocannon ${p.connections} connections x ${p.seconds} s/target in ${p.loadRounds} interleaved rounds after ${p.warmupSeconds} s warm-up`,
    );
    out.push(`request : {"model": "sim-core-1" (a,b) | "svc-core" (c,d), "messages": [{"role": "user", "content": ${JSON.stringify(USER_MESSAGE)}}]}`);
    out.push(
      `stream  : same + "stream": true, "stream_options": {"include_usage": true}, content ${JSON.stringify(streamMessage(STREAM_TOKENS, 0))}; ` +
        `${p.streamRequests} sequential requests/target` +
        (p.pacedRequests > 0 ? `; paced: ${JSON.stringify(streamMessage(PACED_TOKENS, PACED_DELAY_MS))}, ${p.pacedRequests} requests/target` : '') +
        (p.slicedRequests > 0
          ? `; sliced (provider writes 1-500 byte slices 1 ms apart): ${JSON.stringify(streamMessage(SLICED_TOKENS, 0, true))}, ${p.slicedRequests} requests/target`
          : '') +
        `; streams/s: ${p.connections} concurrent streaming clients x ${p.seconds} s/target in ${p.loadRounds} interleaved rounds (0 ms rows), every stream read to its end and checked`,
    );
    out.push(`gateways: main: memory store, credit check off (the stack the integration tests start), used by (c) and the streaming rows`);
    for (const v of targets.variants) {
      const rows = unary.filter((s) => s.gateway === v.name).map((s) => s.label.split(' ')[0]);
      out.push(`          ${v.name}: ${v.describe}; own simulator, account service, sidecar, Envoy, redis-server${rows.length ? `; used by ${rows.join(', ')}` : ''}`);
    }
    out.push(
      `caveat  : ${machine.cpus} CPU(s) shared by the load generator (this process), every Envoy, sidecar, account service, simulator (and redis-server) of the run; ` +
        'absolute numbers are this box only, compare ratios and runs on the same box. This process also drains every child\'s stdout (every Envoy writes one access-log line per request). ' +
        'The gateways not being measured sit idle meanwhile.',
    );
    process.stdout.write(`${out.join('\n')}\n\n`);

    await smokeCheck(targets, scenarios);

    if (p.loadWarmupSeconds > 0) {
      process.stdout.write(`bench: warm-up under load, ${p.loadWarmupSeconds} s per target...\n`);
      for (const s of scenarios) await warmUnderLoad(s.request(targets), p.connections, p.loadWarmupSeconds, s.kind === 'stream' ? s.checkEach : undefined);
    }

    if (unary.length > 0) process.stdout.write('bench: latency phase (sequential)...\n');
    const samples = await latencyPhase(targets, unary, p);

    const streamSamples = new Map<string, StreamSample>();
    if (streams.length > 0) {
      process.stdout.write('bench: streaming phase (sequential)...\n');
      for (const [k, v] of await streamPhase(targets, streams, p.streamRequests, p, p.streamWarmup)) streamSamples.set(k, v);
    }
    if (paced.length > 0) {
      process.stdout.write('bench: paced streaming phase (sequential)...\n');
      for (const [k, v] of await streamPhase(targets, paced, p.pacedRequests, p)) streamSamples.set(k, v);
    }
    if (sliced.length > 0) {
      process.stdout.write('bench: sliced streaming phase (sequential)...\n');
      for (const [k, v] of await streamPhase(targets, sliced, p.slicedRequests, p)) streamSamples.set(k, v);
    }

    const redisCalls: Array<Awaited<ReturnType<typeof redisProbe>>> = [];
    for (const s of unary) {
      if (!s.gateway) continue;
      process.stdout.write(`bench: redis commandstats ${s.label}...\n`);
      redisCalls.push(await redisProbe(targets, s, s.gateway));
    }

    process.stdout.write('bench: messages per request...\n');
    const messages: MessageCounts[] = [];
    for (const s of [...unary, ...streams, ...paced, ...sliced]) {
      const m = await messageProbe(targets, s, MESSAGE_PROBE_REQUESTS);
      if (m) messages.push(m);
    }

    process.stdout.write(`bench: throughput phase, ${unary.map((s) => s.label.split(' ')[0]).join(' ')} in ${p.loadRounds} rounds...\n`);
    const through = await throughputRuns(targets, unary, p);
    process.stdout.write(`bench: streams/s phase, ${streams.map((s) => s.label.split(' ')[0]).join(' ')} in ${p.loadRounds} rounds...\n`);
    const loads = await streamLoadRuns(targets, streams, p);
    const memory = memoryOf(targets);

    const results: ScenarioResult[] = unary.map((s) => {
      const sample = samples.get(s.name)!;
      return {
        name: s.name,
        label: s.label,
        latency: { ...latencyStats(sample.okMs), non2xx: sample.non2xx, errors: sample.errors, firstProblem: sample.firstProblem },
        throughput: through.get(s.name)!,
      };
    });
    const comparisons = COMPARISONS.map((c) => compare(results, c)).filter((c): c is Comparison => c !== null);
    const streamResults = [...streams, ...paced, ...sliced].map((s) => streamResult(s, streamSamples.get(s.name)!, loads.get(s.name)));
    const streamComparisons = STREAM_COMPARISONS.map((c) => compareStream(streamResults, c)).filter((c): c is StreamComparison => c !== null);

    const lines: string[] = [];
    if (results.length > 0) {
      lines.push('');
      lines.push(`Latency: sequential client, 1 keep-alive connection, hrtime per request (send -> last body byte), 2xx only`);
      lines.push(latencyTable(results));
      lines.push('');
      lines.push(`Throughput: autocannon, ${p.connections} connections, ${p.seconds} s per target in ${p.loadRounds} interleaved rounds (* autocannon latency, whole ms: median over the rounds)`);
      lines.push(throughputTable(results));
      lines.push('');
      const procNames = ['bench', 'simulator', 'envoy-bare', 'envoy-floor', 'null-sidecar', 'envoy', 'sidecar', 'account', ...(targets.variants.length ? ['redis'] : [])];
      lines.push('CPU ms per request during the throughput run, by process (from /proc; 10 ms tick resolution; each gateway row: that gateway\'s own processes)');
      lines.push(cpuTable(results, procNames));
    }
    for (const c of comparisons) {
      lines.push('');
      lines.push(comparisonBlock(c));
    }
    if (messages.length > 0) {
      lines.push('');
      lines.push(
        `gRPC messages per request between Envoy and its sidecar: the Envoy's admin /stats counters before/after ${MESSAGE_PROBE_REQUESTS} sequential requests + 100 ms ` +
          '(ext_authz calls = http.*.ext_authz.{ok,denied,error}, every ext_authz filter; ext_proc = http.*.ext_proc.{streams_started,stream_msgs_sent,stream_msgs_received}; ' +
          'sidecar msgs = ext_authz calls + ext_proc messages sent; gRPC calls = cluster.sidecar.upstream_rq_total; ' +
          'ext_proc msgs/event = ext_proc messages sent per data: event the client received). Bare Envoy has no filters',
      );
      lines.push(messagesTable(messages));
    }
    if (redisCalls.length > 0) {
      lines.push('');
      lines.push(
        `Redis commands per request: calls/req = INFO commandstats of the gateway's own redis-server, before/after ${REDIS_PROBE_REQUESTS} sequential requests + ${REDIS_SETTLE_WAIT_MS} ms ` +
          '(commandstats counts the commands Lua scripts run too); sent/req and in scripts/req = the same window seen through MONITOR, split by source; ' +
          'sent/req = round trips unless pipelined; the probe\'s own INFO/ECHO not counted',
      );
      lines.push(redisCallsTable(redisCalls));
    }
    if (streamResults.length > 0) {
      lines.push('');
      lines.push(
        'Streaming: sequential client, 1 keep-alive connection, hrtime from the request write; TTFB = first body byte; ' +
          '1st event = the read that completed the first data: {...} event whose JSON parses (what an SDK can use); [DONE] = the read that completed data: [DONE]; ' +
          'per chunk = (last byte - first byte) / (data: events - 1); events include data: [DONE]; reads = socket reads the client saw; ms',
      );
      lines.push(streamTable(streamResults));
      for (const r of streamResults) {
        if (r.reads.p50 * 2 <= r.events.p50) {
          lines.push(
            `note: ${r.label}: the ${fmt(r.events.p50, 0)} events arrived in p50 ${fmt(r.reads.p50, 0)} socket read(s), i.e. coalesced on the way; ` +
              `its per-chunk time is how fast a batch drains, not a gap between chunks (${paced.length ? 'compare the paced rows, and ' : 'see '}CPU per event below)`,
          );
        }
      }
      lines.push('');
      lines.push(
        'CPU ms per streamed response during the sequential streaming loop, by process (from /proc; 10 ms tick resolution, summed over the rounds); ' +
          'sidecar/event = sidecar CPU (the floor\'s: null-sidecar) / data: events received per response',
      );
      lines.push(streamCpuTable(streamResults, ['bench', 'simulator', 'envoy-bare', 'envoy-floor', 'null-sidecar', 'envoy', 'sidecar', 'account', ...(targets.variants.length ? ['redis'] : [])]));
      if (streamResults.some((r) => r.load)) {
        lines.push('');
        lines.push(
          `Streams per second: ${p.connections} concurrent streaming clients (1 keep-alive connection each) x ${p.seconds} s per target in ${p.loadRounds} interleaved rounds after ${p.warmupSeconds} s warm-up; ` +
            'a stream counts once read to its end and checked (event count, data: [DONE]); latencies under that load, ms; CPU from /proc over the measured run ' +
            '(the floor\'s sidecar is null-sidecar; per event = per data: event received)',
        );
        lines.push(streamLoadTable(streamResults));
      }
      for (const c of streamComparisons) {
        lines.push('');
        lines.push(streamComparisonBlock(c));
      }
    }
    lines.push('');
    lines.push('Memory: resident set of every process of the run, peak = VmHWM (highest since the process started), after = VmRSS after the last phase; MiB');
    lines.push(memoryTable(memory));
    const judged = targets.variants.some((v) => v.name === 'credit') ? 'credit' : 'gateway';
    const targetTable = targetRows({ gateway: judged, results, comparisons, streams: streamResults, streamComparisons, memory });
    lines.push('');
    lines.push(
      `Issue 11 targets, this run: gateway = ${judged === 'credit' ? '(d) redis store, credit check on' : '(c) memory store, credit check off (the credit gateway was not measured)'}; ` +
        'floor = the same measure for the floor (gateway Envoy config, no-op sidecar), what the architecture costs before any gateway code; ' +
        'added = minus bare Envoy in the same run; on those rows, gateway - floor is what the gateway\'s code adds and the room the floor leaves is the target ' +
        'minus the floor (at or below zero the floor alone misses it). Shared-box numbers: compare on a quiet machine before judging.',
    );
    lines.push(targetsTable(targetTable));
    const ceilings = ceilingRows({ gateway: judged, results, comparisons, streams: streamResults, streamComparisons, memory }, os.cpus().length);
    lines.push('');
    lines.push(
      `What the box's ${os.cpus().length} cores allow at ${p.connections} connections: ceiling = cores / the CPU every process of the row spent per request ` +
        '(or stream) in its load run, load generator included, as % of bare Envoy\'s measured rate (every core busy with that work, kernel networking uncounted). ' +
        'A target above the floor\'s ceiling cannot be met on this box by any sidecar: the floor runs no gateway code. ' +
        'Sidecar budget = the CPU per request the gateway\'s sidecar could spend and still reach the target, its other processes costing what they did ' +
        '(negative: they alone are over it); in brackets what the floor\'s do-nothing sidecar spends.',
    );
    lines.push(ceilingTable(ceilings));
    lines.push('');
    lines.push(
      `This box after a pause (test/bench/cold-cpu.ts, before the targets started): one chat admission, ${cold.samples} samples per pause. ` +
        `At one connection every hop starts after one, so the floor and the gateway pay this per hop (docs/benchmark.md).`,
    );
    lines.push(coldCpuTable(cold));
    const problems = [
      ...results.filter((r) => r.latency.firstProblem !== null).map((r) => [r.label, r.latency.firstProblem] as const),
      ...streamResults.filter((r) => r.firstProblem !== null).map((r) => [r.label, r.firstProblem] as const),
      ...redisCalls.filter((r) => r.firstProblem !== null).map((r) => [`${r.label} (redis probe)`, r.firstProblem] as const),
      ...streamResults.filter((r) => r.load?.firstProblem).map((r) => [`${r.label} (streams/s)`, r.load!.firstProblem] as const),
    ];
    for (const [label, problem] of problems) lines.push(`\n${label}: first problem: ${problem}`);
    const failed = [
      ...results.filter((r) => r.latency.non2xx + r.latency.errors + r.throughput.non2xx + r.throughput.errors > 0).map((r) => r.name),
      ...streamResults.filter((r) => r.non2xx + r.errors + r.bad > 0).map((r) => r.name),
      ...redisCalls.filter((r) => r.failures > 0).map((r) => `${r.scenario} (redis probe)`),
      ...streamResults.filter((r) => r.load && r.load.non2xx + r.load.errors + r.load.bad > 0).map((r) => `${r.name} (streams/s)`),
      ...messages.filter((m) => m.failures > 0).map((m) => `${m.scenario} (message probe)`),
    ];
    if (failed.length > 0) {
      lines.push(`\nWARNING: errors, bad streams or non-2xx responses in: ${failed.join(', ')}`);
      const tally = [...targets.accessLogProblems()].sort((a, b) => b[1] - a[1]);
      if (tally.length > 0) {
        lines.push('recent non-2xx Envoy access-log entries (process status flags details: count; status 0 DC = cut off at the end of a run):');
        for (const [k, n] of tally.slice(0, 10)) lines.push(`  ${k}: ${n}`);
      }
      exitCode = 1;
    }
    const loadEnd = os.loadavg().map((v) => Number(v.toFixed(2)));
    lines.push(`\nload avg at end: ${loadEnd.join(' ')} (at start: ${machine.loadavg_at_start.join(' ')}; anything else running on this box skews the numbers)`);
    lines.push('');
    lines.push(
      jsonSummary({
        time: new Date().toISOString(),
        machine: { ...machine, loadavg_at_end: loadEnd, envoy: targets.envoyVersion },
        params: { ...params, gateways: Object.fromEntries(targets.variants.map((v) => [v.name, GATEWAY_VARIANTS[v.name].describe])) },
        results,
        comparisons,
        streams: streamResults,
        streamComparisons,
        redis: redisCalls.map(({ failures: _f, firstProblem: _p, ...r }) => r),
        extra: {
          messages_per_req: messagesJson(messages),
          cold_cpu: { samples: cold.samples, rows: cold.rows.map((r) => ({ pause_ms: r.pauseMs, p50_us: Number(r.p50Us.toFixed(1)), p90_us: Number(r.p90Us.toFixed(1)) })) },
          memory_mb: Object.fromEntries(memory.map((m) => [m.process, { peak: Number(m.peakMb.toFixed(1)), after: Number(m.afterMb.toFixed(1)) }])),
          targets: {
            gateway: judged,
            rows: targetTable.map((r) => ({
              ...r,
              gateway: Number(r.gateway.toFixed(4)),
              floor: Number(r.floor.toFixed(4)),
              met: met(r),
              ...(r.added ? { over_floor: Number(overFloor(r).toFixed(4)), room_over_floor: Number(roomOverFloor(r).toFixed(4)) } : {}),
            })),
            ceilings: ceilings.map((r) => ({
              what: r.what,
              target: r.target,
              ...Object.fromEntries(
                (['floor', 'gateway'] as const).flatMap((k) => [
                  [`${k}_cpu_ms`, Number(r[k].cpuMs.toFixed(4))],
                  [`${k}_ceiling_pct`, Number(r[k].ceilingPct.toFixed(1))],
                  [`${k}_measured_pct`, Number(r[k].measuredPct.toFixed(1))],
                ]),
              ),
              sidecar_budget_ms: Number(r.sidecarBudgetMs.toFixed(4)),
              null_sidecar_ms: Number(r.nullSidecarMs.toFixed(4)),
            })),
          },
        },
      }),
    );
    process.stdout.write(`${lines.join('\n')}\n`);
  } catch (err) {
    if (interrupted()) return 130; // the signal handler is stopping everything and exits
    process.stderr.write(`bench failed: ${(err as Error).stack ?? String(err)}\n\nprocess output:\n${targets.logs()}\n`);
    exitCode = 1;
  } finally {
    if (!interrupted()) await stopTargets();
  }
  if (interrupted()) return 130;
  const leftovers = await reapChildren();
  removeBenchRoot();
  if (leftovers.length > 0) {
    process.stderr.write(`bench: had to signal leftover child processes:\n  ${leftovers.join('\n  ')}\n`);
    exitCode = 1;
  } else {
    process.stderr.write('bench: all processes stopped\n'); // stderr: BENCH_JSON stays the last line of stdout
  }
  return exitCode;
}

main().then(
  (code) => {
    if (!interrupted()) process.exit(code); // else the signal handler exits once it has stopped everything
  },
  (err: unknown) => {
    if (interrupted()) return; // the signal handler is stopping everything and exits
    process.stderr.write(`bench failed: ${(err as Error).stack ?? String(err)}\n`);
    void reapChildren()
      .then(() => removeBenchRoot())
      .finally(() => process.exit(1));
  },
);
