/**
 * Where the sidecar's CPU goes, sampled by the kernel (Linux `perf`) instead
 * of by V8's profiler (profile.ts): every thread (the collector's and the
 * compiler's helpers too), the kernel's own work for the process (its system
 * calls, the loopback networking they run), V8's builtins and inline-cache
 * stubs, all in proportion. V8's sampling profiler attributes system calls
 * and builtins out of proportion (session 24 found it put 20 µs per JSON chat
 * on a `write(2)` that perf measures at 3): use this one to decide where to
 * cut, profile.ts for the call tree of our own code.
 *
 * Starts one full gateway (Redis store, credit check on: the bench's judged
 * variant) with the sidecar under V8's `--perf-prof` (a dump of every piece of
 * code it compiles, with its address and when; `perf inject --jit` turns it
 * into symbols, so code that was freed and its address reused by other code
 * keeps its own name: the simpler `--perf-basic-prof` map names such an
 * address after whichever code was there first), warms it up under load, then
 * drives chats of one kind at 16 connections (PERF_CONNECTIONS) while `perf record` samples the
 * sidecar, and prints:
 *   - what the CPU was doing (JIT-compiled JavaScript, builtins, inline-cache
 *     misses, the runtime, garbage collection, malloc, HTTP/2, the kernel);
 *   - self time by the nearest JIT-compiled function (builtins and stubs
 *     count for the function that called them), and by owner;
 *   - inclusive time of our own functions;
 *   - the kernel's share by system call;
 *   - inline-cache misses by the function they happened in.
 *
 *   npx tsx test/bench/perf-profile.ts     PERF_KIND json (default) or stream, PERF_SECONDS (default 10) sampled,
 *                                          PERF_FREQUENCY (default 2000) samples a second, PERF_TOP (default 20) rows,
 *                                          PERF_LOAD_WARMUP_SECONDS (default 5) of load first (at 16 connections),
 *                                          PERF_CONNECTIONS (default 16; 1: the latency rows' case, sampled after
 *                                          2,500 requests at that concurrency), PERF_TURNS (default 0)
 *                                          messages of history per JSON chat, PERF_KEEP_SCRIPT=path keeps
 *                                          `perf script`'s text there (every sample's call chain)
 *
 * Needs `perf` (Debian: `apt-get install linux-perf`) and a kernel that lets
 * this user sample its own processes (`/proc/sys/kernel/perf_event_paranoid`
 * at 2 or below). Virtual machines often have no hardware counters: it
 * samples the `cpu-clock` software event, which every kernel has.
 */
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { startGateway } from '../harness/gateway.js';
import { driveGateway } from './gateway-load.js';
import { chatBody, streamBody, STREAM_TOKENS } from './scenarios.js';
import { CREDIT_GRANT, GATEWAY_VARIANTS } from './targets.js';
import { envInteger, fmt, table } from './report.js';
import { LOAD_WARMUP_SECONDS, warmUnderLoad } from './warm-up.js';
import { categoryOf, inclusiveOurs, jsFrameName, nearestJs, ownerOf, parsePerfScript, shares, syscallOf, type Sample } from './perf-script.js';

const KIND = process.env.PERF_KIND === 'stream' ? 'stream' : 'json';
const SECONDS = envInteger('PERF_SECONDS', 10);
const FREQUENCY = envInteger('PERF_FREQUENCY', 2000);
const TOP = envInteger('PERF_TOP', 20);
const LOAD_WARMUP = envInteger('PERF_LOAD_WARMUP_SECONDS', LOAD_WARMUP_SECONDS, 0);
const TURNS = envInteger('PERF_TURNS', 0, 0);
const CONNECTIONS = envInteger('PERF_CONNECTIONS', 16);
const ALIAS = 'svc-core';

function perfVersion(): string {
  try {
    return execFileSync('perf', ['--version'], { encoding: 'utf8' }).trim();
  } catch {
    throw new Error('perf not found on PATH: install it (Debian: `apt-get install linux-perf`); this tool samples the sidecar with it');
  }
}

/** A command's standard output (perf script prints tens of MB); rejects with its stderr on a non-zero exit. */
const run = async (cmd: string, args: readonly string[]): Promise<string> => (await promisify(execFile)(cmd, args, { maxBuffer: 1 << 30 })).stdout;

const pct = (v: number) => `${fmt(v * 100, 2)} %`;
const rows = (m: Map<string, number>, n = TOP) => [...m].slice(0, n).map(([k, v]) => [k, pct(v)]);

function report(samples: readonly Sample[]): string {
  const out: string[] = [];
  out.push(table(['what the CPU was doing (leaf of each sample)', 'share'], rows(shares(samples, categoryOf), 20)));
  out.push(table(['owner of the nearest JIT-compiled function', 'self share'], rows(shares(samples, (s) => {
    const f = nearestJs(s);
    return f ? ownerOf(f) : '(no JavaScript on the stack: the runtime, GC, the kernel)';
  }))));
  out.push(table(['function (self, builtins and stubs counted for their caller)', 'share'], rows(shares(samples, (s) => {
    const f = nearestJs(s);
    return f ? jsFrameName(f) : null;
  }))));
  out.push(table(['function of ours (inclusive)', 'share'], rows(inclusiveOurs(samples))));
  const kernel = samples.filter((s) => categoryOf(s) === 'the kernel');
  out.push(table(['the kernel, by system call', 'share of all'], [...shares(kernel, syscallOf)].slice(0, TOP).map(([k, v]) => [k, pct((v * kernel.length) / (samples.length || 1))])));
  const ic = samples.filter((s) => categoryOf(s).startsWith('inline-cache'));
  out.push(table(['inline-cache misses, by the function they happened in', 'share of all'], [...shares(ic, (s) => {
    const f = nearestJs(s);
    return f ? jsFrameName(f) : '(no JavaScript frame)';
  })].slice(0, TOP).map(([k, v]) => [k, pct((v * ic.length) / (samples.length || 1))])));
  return out.join('\n');
}

async function main(): Promise<void> {
  const version = perfVersion();
  const dir = mkdtempSync(join(tmpdir(), 'gw-perf-'));
  const spec = GATEWAY_VARIANTS.credit;
  // The code dump goes to a directory of its own (perf inject writes a file per piece of code beside it).
  const gw = await startGateway({ ...spec.options, nodeArgs: { sidecar: ['--perf-prof', `--perf-prof-path=${dir}`] } });
  const pid = gw.stack.process('sidecar').pid!;
  try {
    await gw.admin.adjustCredits(gw.tenantId, CREDIT_GRANT, 'perf-grant', 'perf-profile');
    const url = `${gw.base}/chat/completions`;
    const headers = { 'content-type': 'application/json', 'x-api-key': gw.key };
    const body = KIND === 'stream' ? streamBody(ALIAS, STREAM_TOKENS, 0) : chatBody(ALIAS, TURNS);
    await warmUnderLoad({ url, method: 'POST', headers, body }, 16, LOAD_WARMUP, KIND === 'stream' ? (status, _b, n) => (status === 200 && n > 0 ? null : `status ${status}`) : undefined);
    // Below 16 connections V8 compiles new paths for the first 2,000-3,000 requests (jit-settle.ts): not sampled.
    if (CONNECTIONS < 16) await driveGateway(gw, 2500, KIND, CONNECTIONS, TURNS);
    const stop = new AbortController();
    const load = driveGateway(gw, Infinity, KIND, CONNECTIONS, TURNS, stop.signal);
    const data = join(dir, 'perf.data');
    // -k 1: the monotonic clock the code dump's timestamps use.
    await run('perf', ['record', '-k', '1', '-e', 'cpu-clock', '-F', String(FREQUENCY), '-g', '-p', String(pid), '-o', data, '--', 'sleep', String(SECONDS)]);
    stop.abort();
    const measured = await load;
    const injected = join(dir, 'perf.jit.data');
    await run('perf', ['inject', '--jit', '-i', data, '-o', injected]);
    const scriptText = await run('perf', ['script', '-i', injected]);
    if (process.env.PERF_KEEP_SCRIPT) writeFileSync(process.env.PERF_KEEP_SCRIPT, scriptText);
    const samples = parsePerfScript(scriptText);
    console.log(
      `sidecar sampled by ${version}: store redis, credit check on, ${CONNECTIONS} connections, ${KIND === 'stream' ? `${STREAM_TOKENS}-token streams` : `JSON chats${TURNS ? ` with ${TURNS} messages of history` : ''}`}; ` +
        `${SECONDS} s at ${FREQUENCY} Hz: ${samples.length} samples, ${measured} ${KIND === 'stream' ? 'streams' : 'chats'} answered while it sampled\n`,
    );
    console.log(report(samples));
  } finally {
    await gw.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error((err as Error).message);
  process.exit(1);
});
