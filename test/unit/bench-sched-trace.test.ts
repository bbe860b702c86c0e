import { describe, expect, it } from 'vitest';
import { delaysOf, ns, perChat, runsByCpu, sampleKind, schedEvent, type Switch, type Wakeup } from '../../test/bench/sched-trace.js';

// As `perf script -F cpu,time,event,trace --ns` prints a `perf sched record` file.
const SWITCH = '[001]   154.591085063:       sched:sched_switch: prev_comm=perf prev_pid=5219 prev_prio=120 prev_state=D ==> next_comm=migration/1 next_pid=18 next_prio=0';
const WAKING = '[000]   154.591089213:       sched:sched_waking: comm=perf pid=5219 prio=120 target_cpu=000';

const sw = (t: number, cpu: number, prev: number, next: number): Switch => ({ t: BigInt(t), cpu, prev, next });
const wake = (t: number, tid: number): Wakeup => ({ t: BigInt(t), tid });

describe('sched-trace: perf lines', () => {
  it('reads a context switch and a wakeup, and nothing else', () => {
    expect(schedEvent(SWITCH)).toEqual({ kind: 'switch', event: { t: 154_591_085_063n, cpu: 1, prev: 5219, next: 18 } });
    expect(schedEvent(WAKING)).toEqual({ kind: 'wakeup', event: { t: 154_591_089_213n, tid: 5219 } });
    expect(schedEvent('[000]   154.591089213:       sched:sched_migrate_task: comm=perf pid=5219 prio=120 orig_cpu=0 dest_cpu=1')).toBeNull();
    expect(schedEvent('')).toBeNull();
  });

  it('turns seconds with any number of decimals into nanoseconds', () => {
    expect(ns('12.5')).toBe(12_500_000_000n);
    expect(ns('0.000000001')).toBe(1n);
    expect(ns('3')).toBe(3_000_000_000n);
  });

  it("names a sample by V8's GC, its compiler, or the innermost symbol without its offset", () => {
    expect(sampleKind(['memmove+0x10', 'v8::internal::Scavenger::ScavengeObject+0x4', 'start_thread'])).toBe("V8's GC");
    expect(sampleKind(['v8::internal::Zone::Expand', 'v8::internal::compiler::PipelineImpl::CreateGraph', 'start_thread'])).toBe("V8's compiler");
    expect(sampleKind(['Builtins_LoadIC+0x1f', 'JS:*handle'])).toBe('Builtins_LoadIC');
    expect(sampleKind([])).toBe('?');
  });
});

describe('sched-trace: timelines', () => {
  // CPU 0: thread 5 until 0, idle, thread 10 from 100 to 300, idle again. CPU 1: thread 20 from 50 to 400, thread 30 after.
  const switches = [sw(0, 0, 5, 0), sw(100, 0, 0, 10), sw(300, 0, 10, 0), sw(50, 1, 0, 20), sw(400, 1, 20, 30), sw(500, 1, 30, 0)];

  it("rebuilds each CPU's runs back to back from its switches", () => {
    const cpus = runsByCpu(switches);
    expect(cpus.get(0)).toEqual([
      { from: 0n, to: 100n, tid: 0 },
      { from: 100n, to: 300n, tid: 10 },
    ]);
    expect(cpus.get(1)).toEqual([
      { from: 50n, to: 400n, tid: 20 },
      { from: 400n, to: 500n, tid: 30 },
    ]);
  });

  it('pairs a wakeup with the thread next running, and the first of two wakeups counts', () => {
    const d = delaysOf(switches, [wake(80, 10), wake(90, 10), wake(380, 30)], runsByCpu(switches));
    expect(d.map((x) => [x.tid, Number(x.ran - x.woken), x.cpu])).toEqual([
      [10, 20, 0],
      [30, 20, 1],
    ]);
  });

  it('ignores a wakeup that reaches a thread still on a CPU (it was on its way to sleep)', () => {
    // Thread 10 runs 100-300 on CPU 0; woken at 200 while running (no wait), then again at 600 after it slept; runs at 650.
    const s = [sw(100, 0, 0, 10), sw(300, 0, 10, 0), sw(650, 0, 0, 10), sw(700, 0, 10, 0)];
    const d = delaysOf(s, [wake(200, 10), wake(600, 10)], runsByCpu(s));
    expect(d.map((x) => [Number(x.woken), Number(x.ran)])).toEqual([[600, 650]]);
  });

  it('tells a wakeup onto an idle CPU from one onto a busy CPU', () => {
    const d = delaysOf(switches, [wake(80, 10), wake(380, 30)], runsByCpu(switches));
    expect(d.map((x) => [x.tid, x.idle])).toEqual([
      [10, true],
      [30, false],
    ]);
  });

  it("sums a chat's window: CPU by group clipped to it, waits of its own threads, their runs", () => {
    const cpus = runsByCpu(switches);
    const delays = delaysOf(switches, [wake(80, 10), wake(380, 30)], cpus);
    const group = (tid: number) => (tid === 0 ? 'idle' : tid === 10 ? 'ours' : 'theirs');
    const c = perChat([200n, 450n], cpus, delays, group, (tid) => tid === 10 || tid === 30);
    expect(c.ms).toBeCloseTo(250 / 1e6, 12);
    // CPU 0: ours 200-300, idle 300-? (no run after 300 is known: not counted); CPU 1: theirs 200-400 (20) and 400-450 (30).
    expect(c.cpu.get('ours')).toBeCloseTo(100 / 1e6, 12);
    expect(c.cpu.get('theirs')).toBeCloseTo(250 / 1e6, 12);
    // Only the wakeup that began inside the window counts (30's at 380, 20 ns, onto a busy CPU).
    expect(c.waitCount).toBe(1);
    expect(c.waitMs).toBeCloseTo(20 / 1e6, 12);
    expect(c.waitIdleMs).toBe(0);
    expect(c.switches).toBe(2);
  });
});
