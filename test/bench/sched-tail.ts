/**
 * What the box's scheduler did during a JSON chat's slowest 1 %: the floor
 * (the gateway's Envoy on the no-op sidecar) and the Redis gateway with the
 * credit check on, sent chats in turn at one connection, while `perf sched
 * record` traces every context switch and wakeup on every CPU (Linux, root or
 * perf_event_paranoid <= 1). For each chat, from the trace and the chat's own
 * send and last-byte times (both CLOCK_MONOTONIC):
 *
 * - CPU time in the chat's window by process group (the target's own
 *   processes, the other targets' processes, this process, other tasks) and
 *   idle time, summed over the CPUs;
 * - wakeup delay: from a thread of the target being woken (while off every
 *   CPU) to it running, summed over the chat's window (time a hop waited for
 *   a CPU), the part of it onto a CPU that was idle (the idle CPU's own
 *   wake-up, on a virtual machine the hypervisor's), by process, and the
 *   longest one;
 * - context switches of the target's tasks.
 *
 * Printed as means over each target's slowest 1 % of chats beside its median
 * 50 % (the chats from p25 to p75): whether the tail is time waiting for a CPU
 * (a busy or preempted box), the target's own processes running longer (its
 * code, its GC) or another process taking the CPUs.
 *
 * With SCHED_SAMPLES=1 a second `perf record` samples every CPU (callchains,
 * 4,999 Hz) meanwhile, and a third table names what the slowest 1 %'s
 * threads were running: the samples in those chats' windows by group and
 * kind (V8's GC, V8's compiler, or the innermost symbol).
 *
 *   npx tsx test/bench/sched-tail.ts     SCHED_REQUESTS (default 3000 per target, measured after SCHED_WARMUP in turn unmeasured)
 *                                        SCHED_WARMUP (default 2500, as the bench's BENCH_WARMUP; 300 shows V8's compiler in the tail)
 *                                        SCHED_LOAD_WARMUP_SECONDS (default 5 at 16 connections per target)
 *                                        SCHED_KEEP=1 keeps the trace (its path is printed)
 */
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, createWriteStream } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { startTargets, stopTargets, installCleanupHandlers, type Targets } from './targets.js';
import { chatBody } from './scenarios.js';
import { envInteger, fmt, table } from './report.js';
import { LOAD_WARMUP_SECONDS, warmUnderLoad } from './warm-up.js';
import { SequentialClient } from './latency.js';
import { delaysOf, lowerBound, ns, perChat, runsByCpu, sampleKind, schedEvent, type ChatSched, type Sample, type Switch, type Wakeup } from './sched-trace.js';

const REQUESTS = envInteger('SCHED_REQUESTS', 3000, 200);
const WARMUP = envInteger('SCHED_WARMUP', 2500, 0);
const LOAD_WARMUP = envInteger('SCHED_LOAD_WARMUP_SECONDS', LOAD_WARMUP_SECONDS, 0);
const SAMPLES = process.env.SCHED_SAMPLES === '1';

interface Target {
  readonly label: string;
  readonly client: SequentialClient;
  /** pid -> group name, for this target's own processes. */
  readonly own: Map<number, string>;
  /** [send, last byte] in ns of CLOCK_MONOTONIC, per measured chat. */
  readonly windows: Array<[bigint, bigint]>;
}

/** One chat; its [send, last byte] window. */
async function chat(t: Target): Promise<[bigint, bigint]> {
  const r = await t.client.one();
  if (r.status !== 200) throw new Error(`${t.label}: status ${r.status}`);
  return [r.sentNs, r.doneNs];
}

function ownPids(pids: Record<string, number | undefined>, names: readonly string[]): Map<number, string> {
  const m = new Map<number, string>();
  for (const n of names) {
    const pid = pids[n];
    if (pid !== undefined) m.set(pid, n);
  }
  return m;
}

function targetsOf(t: Targets): Target[] {
  const client = (url: string, headers: Record<string, string>, body: string) =>
    new SequentialClient({ url, method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body });
  const main = t.pids();
  const credit = t.variant('credit');
  return [
    {
      label: 'floor',
      client: client(`${t.floorUrl}/v1/chat/completions`, { authorization: `Bearer ${t.upstreamKey}` }, chatBody('sim-core-1')),
      own: ownPids(main, ['envoy-floor', 'null-sidecar', 'simulator']),
      windows: [],
    },
    {
      label: 'gateway (Redis, credit check on)',
      client: client(`${credit.base}/chat/completions`, { 'x-api-key': credit.key }, chatBody('svc-core')),
      own: ownPids(credit.pids(), ['envoy', 'sidecar', 'simulator', 'redis']),
      windows: [],
    },
  ];
}

/** Every thread id of a process (its /proc task list; threads of a Node or Envoy process live as long as it does). */
function threadsOf(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).map(Number);
  } catch {
    return [];
  }
}

/** Runs `perf script` with `args`, handing each output line to `line` as it comes (a trace runs to millions of lines). */
async function perfScript(args: readonly string[], line: (l: string) => void): Promise<void> {
  const child = spawn('perf', ['script', ...args], { stdio: ['ignore', 'pipe', 'ignore'] });
  let tail = '';
  child.stdout.on('data', (b: Buffer) => {
    const parts = (tail + b.toString('utf8')).split('\n');
    tail = parts.pop() ?? '';
    for (const l of parts) line(l);
  });
  await new Promise<void>((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`perf script exited ${code}`))));
  });
  line(tail);
}

/** Reads the sched_switch and sched_waking (or sched_wakeup) events of a `perf sched record` file. */
async function readTrace(file: string): Promise<{ switches: Switch[]; wakeups: Wakeup[] }> {
  const switches: Switch[] = [];
  const wakeups: Wakeup[] = [];
  await perfScript(['-i', file, '-F', 'cpu,time,event,trace', '--ns'], (l) => {
    const e = schedEvent(l);
    if (e?.kind === 'switch') switches.push(e.event);
    else if (e) wakeups.push(e.event);
  });
  return { switches, wakeups };
}

/** Reads `perf script` of a callchain recording: one header line per sample, then its frames. */
async function readSamples(file: string): Promise<Sample[]> {
  const out: Sample[] = [];
  let head: { t: bigint; tid: number } | null = null;
  let frames: string[] = [];
  const flush = () => {
    if (head) out.push({ ...head, kind: sampleKind(frames) });
    head = null;
    frames = [];
  };
  await perfScript(['-i', file, '-F', 'tid,time,ip,sym', '--ns'], (l) => {
    const h = /^\s*(\d+)\s+([\d.]+):\s*$/.exec(l);
    if (h) {
      flush();
      head = { t: ns(h[2] as string), tid: Number(h[1]) };
      return;
    }
    const f = /^\s+[0-9a-f]+\s+(.+)$/.exec(l);
    if (f && head) frames.push((f[1] as string).trim());
  });
  flush();
  return out.sort((a, b) => (a.t < b.t ? -1 : a.t > b.t ? 1 : 0));
}

// ---- main ----

try {
  execFileSync('perf', ['--version'], { stdio: 'ignore' });
} catch {
  throw new Error('sched-tail: needs `perf` (linux-perf) on PATH');
}
installCleanupHandlers();
const dir = mkdtempSync(join(tmpdir(), 'sched-tail-'));
const file = join(dir, 'sched.data');
const samplesFile = join(dir, 'samples.data');
const t = await startTargets({ variants: ['credit'] });
try {
  const targets = targetsOf(t);
  for (const x of targets) await warmUnderLoad(x.client.spec, 16, LOAD_WARMUP);
  for (let i = 0; i < WARMUP; i++) for (const x of targets) await chat(x);

  const perfLog = createWriteStream(join(dir, 'perf.log'));
  const record = (args: readonly string[]) => {
    const p = spawn('perf', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    p.stdout.pipe(perfLog);
    p.stderr.pipe(perfLog);
    return p;
  };
  const perfs = [record(['sched', 'record', '-k', 'CLOCK_MONOTONIC', '-a', '-o', file])];
  if (SAMPLES) perfs.push(record(['record', '-F', '4999', '-a', '-g', '-k', 'CLOCK_MONOTONIC', '-o', samplesFile]));
  await new Promise((r) => setTimeout(r, 1500)); // perf's buffers mapped on every CPU
  for (let i = 0; i < REQUESTS; i++) for (const x of targets) x.windows.push(await chat(x));
  for (const x of targets) x.client.close();
  for (const p of perfs) p.kill('SIGINT');
  await Promise.all(perfs.map((p) => new Promise((r) => p.once('exit', r))));

  // Thread id -> group: each target's processes by name, every other process of the topology as "other targets", this process as "bench".
  const group = new Map<number, string>();
  const pidsAll = { ...t.pids(), ...t.variant('credit').pids() };
  for (const pid of Object.values(pidsAll)) if (pid !== undefined) for (const tid of threadsOf(pid)) group.set(tid, 'other targets');
  // A Node process's main thread is its pid; its other threads are V8's GC helpers and libuv's pool.
  for (const x of targets) for (const [pid, name] of x.own) for (const tid of threadsOf(pid)) group.set(tid, tid === pid ? name : `${name} (other threads)`);
  for (const tid of threadsOf(process.pid)) group.set(tid, tid === process.pid ? 'bench' : 'bench (other threads)');
  const groupOf = (tid: number) => (tid === 0 ? 'idle' : (group.get(tid) ?? 'other tasks'));

  const { switches, wakeups } = await readTrace(file);
  const samples = SAMPLES ? await readSamples(samplesFile) : null;
  const cpus = runsByCpu(switches);
  const delays = delaysOf(switches, wakeups, cpus);
  process.stdout.write(`trace: ${switches.length} switches and ${wakeups.length} wakeups on ${cpus.size} CPUs\n`);

  for (const x of targets) {
    const ownTids = new Set([...x.own.keys()].flatMap(threadsOf));
    const chats = x.windows.map((w) => perChat(w, cpus, delays, groupOf, (tid) => ownTids.has(tid))).sort((p, q) => p.ms - q.ms);
    const n = chats.length;
    const slow = chats.slice(n - Math.max(1, Math.floor(n / 100)));
    const mid = chats.slice(Math.floor(n / 4), Math.ceil((3 * n) / 4));
    const mean = (cs: readonly ChatSched[], f: (c: ChatSched) => number) => fmt(cs.reduce((s, c) => s + f(c), 0) / cs.length);
    const groups = [...new Set([...[...x.own.values()].flatMap((g) => [g, `${g} (other threads)`]), 'other targets', 'bench', 'bench (other threads)', 'other tasks', 'idle'])];
    const rows: string[][] = [
      ['chat, send -> last byte', mean(mid, (c) => c.ms), mean(slow, (c) => c.ms)],
      ...groups.map((g) => [`CPU: ${g}`, mean(mid, (c) => c.cpu.get(g) ?? 0), mean(slow, (c) => c.cpu.get(g) ?? 0)]),
      ['its tasks: wakeups', mean(mid, (c) => c.waitCount), mean(slow, (c) => c.waitCount)],
      ['its tasks: wakeup -> running, summed', mean(mid, (c) => c.waitMs), mean(slow, (c) => c.waitMs)],
      ['  of which onto an idle CPU', mean(mid, (c) => c.waitIdleMs), mean(slow, (c) => c.waitIdleMs)],
      ...[...new Set([...x.own.values()].flatMap((g) => [g, `${g} (other threads)`]))].map((g) => [
        `  of which ${g}`,
        mean(mid, (c) => c.waitBy.get(g) ?? 0),
        mean(slow, (c) => c.waitBy.get(g) ?? 0),
      ]),
      ['its tasks: longest wakeup -> running', mean(mid, (c) => c.longestWaitMs), mean(slow, (c) => c.longestWaitMs)],
      ['its tasks: runs (switched in)', mean(mid, (c) => c.switches), mean(slow, (c) => c.switches)],
    ];
    process.stdout.write(`\n${x.label}: ${n} chats; ms, mean per chat (CPU summed over the CPUs)\n${table(['measure', 'p25-p75', 'slowest 1 %'], rows)}\n`);
    if (samples) {
      // The slowest 1 %'s windows: samples by group and kind, as ms per chat (one sample = 1/4999 s).
      const slowWins = x.windows.map((w) => ({ w, ms: Number(w[1] - w[0]) / 1e6 })).sort((p, q) => q.ms - p.ms).slice(0, slow.length);
      const tally = new Map<string, number>();
      for (const { w } of slowWins) {
        for (let i = lowerBound(samples, w[0], (v) => v.t); i < samples.length; i++) {
          const v = samples[i] as Sample;
          if (v.t >= w[1]) break;
          const k = `${groupOf(v.tid)}: ${v.kind}`;
          tally.set(k, (tally.get(k) ?? 0) + 1);
        }
      }
      const top = [...tally].sort((p, q) => q[1] - p[1]).slice(0, 15);
      process.stdout.write(
        `${x.label}, slowest 1 %: what the CPUs ran (samples, ms per chat)\n${table(['group: kind', 'ms'], top.map(([k, c]) => [k, fmt((c * 1000) / 4999 / slowWins.length)]))}\n`,
      );
    }
  }
  if (process.env.SCHED_KEEP === '1') process.stdout.write(`\ntrace kept: ${file}\n`);
  else rmSync(dir, { recursive: true, force: true });
} finally {
  await stopTargets();
}
