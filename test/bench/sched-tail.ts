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
import { Agent, request } from 'node:http';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, createWriteStream } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { startTargets, stopTargets, installCleanupHandlers, type Targets } from './targets.js';
import { chatBody } from './scenarios.js';
import { envInteger, fmt, table } from './report.js';
import { LOAD_WARMUP_SECONDS, warmUnderLoad } from './warm-up.js';

const REQUESTS = envInteger('SCHED_REQUESTS', 3000, 200);
const WARMUP = envInteger('SCHED_WARMUP', 2500, 0);
const LOAD_WARMUP = envInteger('SCHED_LOAD_WARMUP_SECONDS', LOAD_WARMUP_SECONDS, 0);
const SAMPLES = process.env.SCHED_SAMPLES === '1';

interface Target {
  readonly label: string;
  readonly url: string;
  readonly headers: Record<string, string>;
  readonly body: string;
  readonly agent: Agent;
  /** pid -> group name, for this target's own processes. */
  readonly own: Map<number, string>;
  /** [send, last byte] in ns of CLOCK_MONOTONIC, per measured chat. */
  readonly windows: Array<[bigint, bigint]>;
}

function chat(t: Target): Promise<[bigint, bigint]> {
  return new Promise((resolve, reject) => {
    const headers = { ...t.headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(t.body) };
    const t0 = process.hrtime.bigint();
    const req = request(t.url, { method: 'POST', agent: t.agent, headers }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve([t0, process.hrtime.bigint()]) : reject(new Error(`${t.label}: status ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end(t.body);
  });
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
  const agent = () => new Agent({ keepAlive: true, maxSockets: 1 });
  const main = t.pids();
  const credit = t.variant('credit');
  return [
    {
      label: 'floor', url: `${t.floorUrl}/v1/chat/completions`, headers: { authorization: `Bearer ${t.upstreamKey}` },
      body: chatBody('sim-core-1'), agent: agent(), own: ownPids(main, ['envoy-floor', 'null-sidecar', 'simulator']), windows: [],
    },
    {
      label: 'gateway (Redis, credit check on)', url: `${credit.base}/chat/completions`, headers: { 'x-api-key': credit.key },
      body: chatBody('svc-core'), agent: agent(), own: ownPids(credit.pids(), ['envoy', 'sidecar', 'simulator', 'redis']), windows: [],
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

// ---- the trace ----

interface Switch {
  readonly t: bigint;
  readonly cpu: number;
  readonly prev: number;
  readonly next: number;
}
interface Wakeup {
  readonly t: bigint;
  readonly tid: number;
}

/** "12345.678901234" seconds -> ns. */
function ns(sec: string): bigint {
  const [s, f = ''] = sec.split('.');
  return BigInt(s ?? '0') * 1_000_000_000n + BigInt((f + '000000000').slice(0, 9));
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

/** Parses `perf script` lines of sched_switch and sched_wakeup events. */
async function readTrace(file: string): Promise<{ switches: Switch[]; wakeups: Wakeup[] }> {
  const switches: Switch[] = [];
  const wakeups: Wakeup[] = [];
  await perfScript(['-i', file, '-F', 'cpu,time,event,trace', '--ns'], (l) => {
    // "[001] 12345.678901234: sched:sched_switch: prev_comm=node prev_pid=12 ... ==> next_comm=x next_pid=34 ..."
    const m = /^\s*\[(\d+)\]\s+([\d.]+):\s+sched:(sched_switch|sched_waking|sched_wakeup|sched_wakeup_new):\s+(.*)$/.exec(l);
    if (!m) return;
    const [, cpu, time, event, trace] = m as unknown as [string, string, string, string, string];
    if (event === 'sched_switch') {
      const prev = /prev_pid=(\d+)/.exec(trace);
      const next = /next_pid=(\d+)/.exec(trace);
      if (prev && next) switches.push({ t: ns(time), cpu: Number(cpu), prev: Number(prev[1]), next: Number(next[1]) });
    } else {
      // perf sched records sched_waking where the kernel has it (the wakeup's start), else sched_wakeup; delaysOf keeps the first per wait.
      const pid = /pid=(\d+)/.exec(trace);
      if (pid) wakeups.push({ t: ns(time), tid: Number(pid[1]) });
    }
  });
  return { switches, wakeups };
}

/** A CPU sample: when, which thread, and what it was running (kind: V8's GC, V8's compiler or the innermost symbol). */
interface Sample {
  readonly t: bigint;
  readonly tid: number;
  readonly kind: string;
}

/** Reads `perf script` of a callchain recording: one header line per sample, then its frames. */
async function readSamples(file: string): Promise<Sample[]> {
  const out: Sample[] = [];
  let head: { t: bigint; tid: number } | null = null;
  let frames: string[] = [];
  const flush = () => {
    if (!head) return;
    const all = frames.join(' ');
    const kind = /Scavenge|MarkCompact|Heap::|Sweeper|ConcurrentMarking|MinorMark|GCTracer/.test(all)
      ? "V8's GC"
      : /compiler::|Compile|Turbofan|Maglev/.test(all)
        ? "V8's compiler"
        : (frames[0] ?? '?').replace(/\+0x[0-9a-f]+$/, '').slice(0, 60);
    out.push({ t: head.t, tid: head.tid, kind });
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

/** A stretch of one CPU running one thread (tid 0: idle). */
interface Run {
  readonly from: bigint;
  readonly to: bigint;
  readonly tid: number;
}

/** Each CPU's runs in time order (back to back: one run ends where the next starts). */
function runsByCpu(switches: readonly Switch[]): Map<number, Run[]> {
  const byCpu = new Map<number, Run[]>();
  const last = new Map<number, Switch>();
  for (const s of [...switches].sort((a, b) => (a.t < b.t ? -1 : a.t > b.t ? 1 : 0))) {
    const before = last.get(s.cpu);
    if (before) {
      let runs = byCpu.get(s.cpu);
      if (!runs) byCpu.set(s.cpu, (runs = []));
      runs.push({ from: before.t, to: s.t, tid: before.next });
    }
    last.set(s.cpu, s);
  }
  return byCpu;
}

/** Wakeup -> the woken thread next switched in, ns. */
interface Delay {
  readonly woken: bigint;
  readonly ran: bigint;
  readonly tid: number;
  /** The CPU it ran on. */
  readonly cpu: number;
  /** That CPU was idle when the wakeup began (the wait is the idle CPU's own wake-up), set by markIdle. */
  idle: boolean;
}

function delaysOf(switches: readonly Switch[], wakeups: readonly Wakeup[]): Delay[] {
  type Ev = { t: bigint; kind: 0 | 1; tid: number; prev: number; cpu: number };
  const events: Ev[] = [
    ...wakeups.map((w): Ev => ({ t: w.t, kind: 0, tid: w.tid, prev: -1, cpu: -1 })),
    ...switches.map((s): Ev => ({ t: s.t, kind: 1, tid: s.next, prev: s.prev, cpu: s.cpu })),
  ].sort((a, b) => (a.t < b.t ? -1 : a.t > b.t ? 1 : a.kind - b.kind));
  // A wakeup counts only for a thread off every CPU: one that wakes a running thread (still on its way to sleep) is no wait.
  const running = new Set<number>();
  const pending = new Map<number, bigint>();
  const out: Delay[] = [];
  for (const e of events) {
    if (e.kind === 0) {
      if (!running.has(e.tid) && !pending.has(e.tid)) pending.set(e.tid, e.t);
      continue;
    }
    running.delete(e.prev);
    pending.delete(e.prev);
    const w = pending.get(e.tid);
    if (w !== undefined && e.tid !== 0) {
      out.push({ woken: w, ran: e.t, tid: e.tid, cpu: e.cpu, idle: false });
      pending.delete(e.tid);
    }
    if (e.tid !== 0) running.add(e.tid);
  }
  return out.sort((a, b) => (a.ran < b.ran ? -1 : 1));
}

/** Sets each delay's `idle`: what its CPU ran when the wakeup began. */
function markIdle(delays: readonly Delay[], cpus: ReadonlyMap<number, readonly Run[]>): void {
  for (const d of delays) {
    const runs = cpus.get(d.cpu);
    if (!runs) continue;
    const run = runs[lowerBound(runs, d.woken + 1n, (r) => r.to)];
    d.idle = run !== undefined && run.from <= d.woken && run.tid === 0;
  }
}

/** First index in a list sorted by key whose key >= x. */
function lowerBound<T>(xs: readonly T[], x: bigint, key: (v: T) => bigint): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (key(xs[mid] as T) < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// ---- per chat ----

interface ChatSched {
  readonly ms: number;
  /** Group -> CPU ms in the window (summed over CPUs); 'idle' included. */
  readonly cpu: Map<string, number>;
  readonly waitMs: number;
  /** Of waitMs: onto a CPU that was idle at the wakeup. */
  readonly waitIdleMs: number;
  readonly waitCount: number;
  /** Group -> wakeup -> running summed, ms. */
  readonly waitBy: Map<string, number>;
  readonly longestWaitMs: number;
  readonly switches: number;
}

function perChat(
  win: readonly [bigint, bigint],
  cpus: ReadonlyMap<number, readonly Run[]>,
  delays: readonly Delay[],
  groupOf: (tid: number) => string,
  isOwn: (tid: number) => boolean,
): ChatSched {
  const [a, b] = win;
  const cpu = new Map<string, number>();
  let switches = 0;
  for (const runs of cpus.values()) {
    for (let i = lowerBound(runs, a + 1n, (r) => r.to); i < runs.length; i++) {
      const r = runs[i] as Run;
      if (r.from >= b) break;
      const from = r.from > a ? r.from : a;
      const to = r.to < b ? r.to : b;
      const g = groupOf(r.tid);
      cpu.set(g, (cpu.get(g) ?? 0) + Number(to - from) / 1e6);
      if (isOwn(r.tid)) switches++;
    }
  }
  let waitMs = 0;
  let waitIdleMs = 0;
  let waitCount = 0;
  const waitBy = new Map<string, number>();
  let longestWaitMs = 0;
  for (let i = lowerBound(delays, a, (d) => d.ran); i < delays.length; i++) {
    const d = delays[i] as Delay;
    if (d.woken >= b) break;
    if (!isOwn(d.tid) || d.woken < a) continue;
    const w = Number(d.ran - d.woken) / 1e6;
    waitMs += w;
    waitCount++;
    if (d.idle) waitIdleMs += w;
    const g = groupOf(d.tid);
    waitBy.set(g, (waitBy.get(g) ?? 0) + w);
    if (w > longestWaitMs) longestWaitMs = w;
  }
  return { ms: Number(b - a) / 1e6, cpu, waitMs, waitIdleMs, waitCount, waitBy, longestWaitMs, switches };
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
  for (const x of targets) await warmUnderLoad({ url: x.url, method: 'POST', headers: { ...x.headers, 'content-type': 'application/json' }, body: x.body }, 16, LOAD_WARMUP);
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
  const delays = delaysOf(switches, wakeups);
  markIdle(delays, cpus);
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
