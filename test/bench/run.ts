/**
 * `npm run bench`: non-streaming chat completions, in ONE run, against
 *   (a) the upstream simulator directly,
 *   (b) Envoy with only the router filter (same listener/route/cluster shape),
 *   (c) the full gateway,
 * then the (c)/(b) ratios. Latency comes from a sequential keep-alive client
 * with hrtime timing (latency.ts, sub-ms resolution), interleaved in rounds
 * across the targets; throughput from autocannon, back-to-back per target.
 *
 * Environment:
 *   BENCH_SECONDS        autocannon run per target, seconds (default 5)
 *   BENCH_CONNECTIONS    autocannon connections (default 10)
 *   BENCH_REQUESTS       sequential latency requests per target (default 2000)
 *   BENCH_ROUNDS         interleaved rounds the latency requests are split into (default 5)
 *   BENCH_WARMUP         sequential warm-up requests per target (default min(200, max(20, REQUESTS/10)))
 *   BENCH_WARMUP_SECONDS autocannon warm-up per target before its measured run (default 1)
 *   BENCH_SCENARIOS      comma-separated subset of scenario names (default all: direct,bare,gateway)
 *   BENCH_ECHO=1         echo the processes' output
 *
 * Ends with one `BENCH_JSON {...}` line for comparing runs.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import autocannon from 'autocannon';
import { SequentialClient, emptySample, latencyStats, type LatencySample } from './latency.js';
import {
  comparisonBlock,
  compare,
  cpuTable,
  jsonSummary,
  latencyTable,
  throughputTable,
  type Comparison,
  type ScenarioResult,
  type ThroughputResult,
} from './report.js';
import { COMPARISONS, SCENARIOS, USER_MESSAGE, type Scenario } from './scenarios.js';
import { installCleanupHandlers, interrupted, reapChildren, startTargets, stopTargets, type Targets } from './targets.js';

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
  readonly rounds: number;
  readonly warmup: number;
  readonly warmupSeconds: number;
  readonly scenarios: readonly string[];
}

function readParams(): Params {
  const requests = envInt('BENCH_REQUESTS', 2000);
  const names = (process.env.BENCH_SCENARIOS ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  for (const n of names) if (!SCENARIOS.some((s) => s.name === n)) throw new Error(`BENCH_SCENARIOS: unknown scenario ${n} (have ${SCENARIOS.map((s) => s.name).join(', ')})`);
  return {
    seconds: envNum('BENCH_SECONDS', 5, 0.1),
    connections: envInt('BENCH_CONNECTIONS', 10),
    requests,
    rounds: Math.min(envInt('BENCH_ROUNDS', 5), requests),
    warmup: envInt('BENCH_WARMUP', Math.min(200, Math.max(20, Math.ceil(requests / 10))), 0),
    warmupSeconds: envNum('BENCH_WARMUP_SECONDS', 1, 0),
    scenarios: names.length ? names : SCENARIOS.map((s) => s.name),
  };
}

// ---- CPU accounting (Linux /proc; absent elsewhere) ----

const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/** utime + stime of a process in ms, or NaN. */
function procCpuMs(pid: number | undefined): number {
  if (pid === undefined) return NaN;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK;
  } catch {
    return NaN;
  }
}

function cpuSnapshot(pids: Record<string, number | undefined>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, pid] of Object.entries(pids)) out[name] = procCpuMs(pid);
  const self = process.cpuUsage();
  out.bench = (self.user + self.system) / 1000;
  return out;
}

// ---- phases ----

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

async function latencyPhase(t: Targets, scenarios: readonly Scenario[], p: Params): Promise<Map<string, LatencySample>> {
  const clients = new Map(scenarios.map((s) => [s.name, new SequentialClient(s.request(t))]));
  const samples = new Map(scenarios.map((s) => [s.name, emptySample()]));
  try {
    for (const s of scenarios) await clients.get(s.name)!.run(p.warmup, emptySample());
    // Interleaved rounds, order rotated each round, so drift (thermal, GC, other load) hits every target alike.
    const base = Math.floor(p.requests / p.rounds);
    for (let round = 0; round < p.rounds; round++) {
      const n = round === p.rounds - 1 ? p.requests - base * (p.rounds - 1) : base;
      for (let i = 0; i < scenarios.length; i++) {
        const s = scenarios[(i + round) % scenarios.length]!;
        await clients.get(s.name)!.run(n, samples.get(s.name)!);
      }
    }
  } finally {
    for (const c of clients.values()) c.close();
  }
  return samples;
}

async function throughputRun(t: Targets, s: Scenario, p: Params): Promise<ThroughputResult> {
  const req = s.request(t);
  const opts = { url: req.url, method: req.method as 'POST', headers: { ...req.headers }, body: req.body, connections: p.connections };
  if (p.warmupSeconds > 0) await autocannon({ ...opts, duration: p.warmupSeconds });
  const pids = t.pids();
  const before = cpuSnapshot(pids);
  const r = await autocannon({ ...opts, duration: p.seconds });
  const after = cpuSnapshot(pids);
  const total = r.requests.total;
  const cpuMsPerReq: Record<string, number> = {};
  for (const name of Object.keys(after)) cpuMsPerReq[name] = total > 0 ? ((after[name] ?? NaN) - (before[name] ?? NaN)) / total : NaN;
  return {
    rps: r.duration > 0 ? total / r.duration : NaN,
    total,
    ok2xx: r['2xx'],
    non2xx: r.non2xx,
    s4xx: r['4xx'],
    s5xx: r['5xx'],
    errors: r.errors,
    timeouts: r.timeouts,
    durationS: r.duration,
    p50: r.latency.p50,
    p99: r.latency.p99,
    cpuMsPerReq,
  };
}

// ---- main ----

async function main(): Promise<number> {
  const p = readParams();
  const scenarios = SCENARIOS.filter((s) => p.scenarios.includes(s.name));
  const cpus = os.cpus();
  const machine = {
    cpus: cpus.length,
    cpu_model: cpus[0]?.model ?? 'unknown',
    mem_gb: Number((os.totalmem() / 2 ** 30).toFixed(1)),
    platform: `${os.platform()} ${os.release()} ${os.arch()}`,
    loadavg_at_start: os.loadavg().map((v) => Number(v.toFixed(2))),
    node: process.version,
  };

  // Stay installed to the end: a Ctrl-C during the final cleanup must not kill this process half-way.
  installCleanupHandlers();
  let targets: Targets;
  try {
    process.stdout.write('bench: starting simulator, account service, sidecar, gateway Envoy and bare Envoy...\n');
    targets = await startTargets({ echo: process.env.BENCH_ECHO === '1' });
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
      rounds: p.rounds,
      warmup: p.warmup,
      warmup_seconds: p.warmupSeconds,
      scenarios: p.scenarios,
      envoy_concurrency: targets.envoyConcurrency,
      message: USER_MESSAGE,
    };
    const out: string[] = [];
    out.push('');
    out.push('== Inference gateway benchmark: non-streaming POST /v1/chat/completions ==');
    out.push(`machine : ${machine.cpus} x ${machine.cpu_model}, ${machine.mem_gb} GiB, ${machine.platform}, load avg ${machine.loadavg_at_start.join(' ')}`);
    out.push(`node    : ${machine.node}`);
    out.push(`envoy   : ${targets.envoyVersion} (${targets.envoyBin}), --concurrency ${targets.envoyConcurrency} for both Envoys`);
    out.push(
      `params  : latency = ${p.requests} sequential requests/target on 1 keep-alive connection, ${p.rounds} interleaved rounds, ${p.warmup} warm-up requests; ` +
        `throughput = autocannon ${p.connections} connections x ${p.seconds} s/target after ${p.warmupSeconds} s warm-up`,
    );
    out.push(`request : {"model": "sim-core-1" (a,b) | "svc-core" (c), "messages": [{"role": "user", "content": ${JSON.stringify(USER_MESSAGE)}}]}`);
    out.push(
      `caveat  : ${machine.cpus} CPU(s) shared by the load generator (this process), both Envoys, the sidecar, the account service and the simulator; ` +
        'absolute numbers are this box only, compare ratios and runs on the same box. This process also drains every child\'s stdout (both Envoys write one access-log line per request).',
    );
    process.stdout.write(`${out.join('\n')}\n\n`);

    await smokeCheck(targets, scenarios);

    process.stdout.write('bench: latency phase (sequential)...\n');
    const samples = await latencyPhase(targets, scenarios, p);

    const through = new Map<string, ThroughputResult>();
    for (const s of scenarios) {
      process.stdout.write(`bench: throughput phase ${s.label}...\n`);
      through.set(s.name, await throughputRun(targets, s, p));
    }

    const results: ScenarioResult[] = scenarios.map((s) => {
      const sample = samples.get(s.name)!;
      return {
        name: s.name,
        label: s.label,
        latency: { ...latencyStats(sample.okMs), non2xx: sample.non2xx, errors: sample.errors, firstProblem: sample.firstProblem },
        throughput: through.get(s.name)!,
      };
    });
    const comparisons = COMPARISONS.map((c) => compare(results, c)).filter((c): c is Comparison => c !== null);

    const lines: string[] = [''];
    lines.push(`Latency: sequential client, 1 keep-alive connection, hrtime per request (send -> last body byte), 2xx only`);
    lines.push(latencyTable(results));
    lines.push('');
    lines.push(`Throughput: autocannon, ${p.connections} connections, ${p.seconds} s per target (* autocannon latency, whole ms)`);
    lines.push(throughputTable(results));
    lines.push('');
    const procNames = ['bench', 'simulator', 'envoy-bare', 'envoy', 'sidecar', 'account'];
    lines.push('CPU ms per request during the throughput run, by process (from /proc; 10 ms tick resolution)');
    lines.push(cpuTable(results, procNames));
    for (const c of comparisons) {
      lines.push('');
      lines.push(comparisonBlock(c));
    }
    const problems = results.filter((r) => r.latency.firstProblem !== null);
    for (const r of problems) lines.push(`\n${r.label}: first problem: ${r.latency.firstProblem}`);
    const failed = results.filter((r) => r.latency.non2xx + r.latency.errors + r.throughput.non2xx + r.throughput.errors > 0);
    if (failed.length > 0) {
      lines.push(`\nWARNING: errors or non-2xx responses in: ${failed.map((r) => r.name).join(', ')}`);
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
      jsonSummary({ time: new Date().toISOString(), machine: { ...machine, loadavg_at_end: loadEnd, envoy: targets.envoyVersion }, params, results, comparisons }),
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
  if (leftovers.length > 0) {
    process.stderr.write(`bench: had to signal leftover child processes:\n  ${leftovers.join('\n  ')}\n`);
    exitCode = 1;
  } else {
    process.stdout.write('bench: all processes stopped\n');
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
    void reapChildren().finally(() => process.exit(1));
  },
);
