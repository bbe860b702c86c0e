/**
 * The pure part of sched-tail.ts: `perf sched` and `perf record` lines
 * parsed, each CPU's timeline rebuilt from its context switches, wakeup
 * delays paired, and one chat's window summed.
 */

export interface Switch {
  readonly t: bigint;
  readonly cpu: number;
  readonly prev: number;
  readonly next: number;
}
export interface Wakeup {
  readonly t: bigint;
  readonly tid: number;
}

/** "12345.678901234" seconds -> ns. */
export function ns(sec: string): bigint {
  const [s, f = ''] = sec.split('.');
  return BigInt(s ?? '0') * 1_000_000_000n + BigInt((f + '000000000').slice(0, 9));
}

/** One line of `perf script -F cpu,time,event,trace --ns` for a sched record: a switch, a wakeup, or nothing. */
export function schedEvent(line: string): { kind: 'switch'; event: Switch } | { kind: 'wakeup'; event: Wakeup } | null {
  // "[001] 12345.678901234: sched:sched_switch: prev_comm=node prev_pid=12 ... ==> next_comm=x next_pid=34 ..."
  const m = /^\s*\[(\d+)\]\s+([\d.]+):\s+sched:(sched_switch|sched_waking|sched_wakeup|sched_wakeup_new):\s+(.*)$/.exec(line);
  if (!m) return null;
  const [, cpu, time, event, trace] = m as unknown as [string, string, string, string, string];
  if (event === 'sched_switch') {
    const prev = /prev_pid=(\d+)/.exec(trace);
    const next = /next_pid=(\d+)/.exec(trace);
    return prev && next ? { kind: 'switch', event: { t: ns(time), cpu: Number(cpu), prev: Number(prev[1]), next: Number(next[1]) } } : null;
  }
  // perf sched records sched_waking where the kernel has it (the wakeup's start), else sched_wakeup; delaysOf keeps the first per wait.
  const pid = /(?:^|\s)pid=(\d+)/.exec(trace);
  return pid ? { kind: 'wakeup', event: { t: ns(time), tid: Number(pid[1]) } } : null;
}

/** A CPU sample: when, which thread, and what it was running (kind: V8's GC, V8's compiler or the innermost symbol). */
export interface Sample {
  readonly t: bigint;
  readonly tid: number;
  readonly kind: string;
}

/** What a sample's call chain (innermost frame first) was doing: V8's GC, V8's compiler, or its innermost symbol. */
export function sampleKind(frames: readonly string[]): string {
  const all = frames.join(' ');
  if (/Scavenge|MarkCompact|Heap::|Sweeper|ConcurrentMarking|MinorMark|GCTracer/.test(all)) return "V8's GC";
  if (/compiler::|Compile|Turbofan|Maglev/.test(all)) return "V8's compiler";
  return (frames[0] ?? '?').replace(/\+0x[0-9a-f]+$/, '').slice(0, 60);
}

/** A stretch of one CPU running one thread (tid 0: idle). */
export interface Run {
  readonly from: bigint;
  readonly to: bigint;
  readonly tid: number;
}

/** Each CPU's runs in time order (back to back: one run ends where the next starts). */
export function runsByCpu(switches: readonly Switch[]): Map<number, Run[]> {
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

/** Wakeup -> the woken thread next switched in, ns (delaysOf returns them in wakeup order). */
export interface Delay {
  readonly woken: bigint;
  readonly ran: bigint;
  readonly tid: number;
  /** The CPU it ran on. */
  readonly cpu: number;
  /** That CPU was idle when the wakeup began (the wait is the idle CPU's own wake-up). */
  readonly idle: boolean;
}

/** The waits from each wakeup to the woken thread's run, `cpus` (runsByCpu of the same switches) telling an idle CPU's. */
export function delaysOf(switches: readonly Switch[], wakeups: readonly Wakeup[], cpus: ReadonlyMap<number, readonly Run[]>): Delay[] {
  type Ev = { t: bigint; kind: 0 | 1; tid: number; prev: number; cpu: number };
  const events: Ev[] = [
    ...wakeups.map((w): Ev => ({ t: w.t, kind: 0, tid: w.tid, prev: -1, cpu: -1 })),
    ...switches.map((s): Ev => ({ t: s.t, kind: 1, tid: s.next, prev: s.prev, cpu: s.cpu })),
  ].sort((a, b) => (a.t < b.t ? -1 : a.t > b.t ? 1 : a.kind - b.kind));
  const pending = new Map<number, bigint>();
  const out: Delay[] = [];
  for (const e of events) {
    if (e.kind === 0) {
      if (!pending.has(e.tid)) pending.set(e.tid, e.t);
      continue;
    }
    // A wakeup that reached a thread still on a CPU (on its way to sleep) was no wait: forgotten when it leaves.
    pending.delete(e.prev);
    const w = pending.get(e.tid);
    if (w !== undefined && e.tid !== 0) {
      out.push({ woken: w, ran: e.t, tid: e.tid, cpu: e.cpu, idle: idleAt(cpus.get(e.cpu), w) });
      pending.delete(e.tid);
    }
  }
  return out.sort((a, b) => (a.woken < b.woken ? -1 : a.woken > b.woken ? 1 : 0));
}

/** Whether a CPU (its runs) was idle at `t`; false where its timeline does not reach. */
function idleAt(runs: readonly Run[] | undefined, t: bigint): boolean {
  const run = runs?.[lowerBound(runs, t + 1n, (r) => r.to)];
  return run !== undefined && run.from <= t && run.tid === 0;
}

/** First index in a list sorted by key whose key >= x. */
export function lowerBound<T>(xs: readonly T[], x: bigint, key: (v: T) => bigint): number {
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

export interface ChatSched {
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

/** One chat's window [send, last byte]: CPU by group, its own threads' waits for a CPU, their runs. */
export function perChat(
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
  // The waits that began inside the window (delays are in wakeup order), to wherever they ended.
  for (let i = lowerBound(delays, a, (d) => d.woken); i < delays.length; i++) {
    const d = delays[i] as Delay;
    if (d.woken >= b) break;
    if (!isOwn(d.tid)) continue;
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
