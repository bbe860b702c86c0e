/**
 * The simulator's sliced output keeps a provider's pace: slices fall due on a fixed clock,
 * so one written late (the simulator kept off a busy core) does not push back the rest.
 * These tests look at the order of gaps between writes, not at how fast anything is.
 */
import type { ServerResponse } from 'node:http';
import { describe, expect, it, vi } from 'vitest';
import { SlicedOutput } from '../../sidecar/simulator/slices.js';

const GAP_MS = 10;

/** A response that records when each slice was written; `onWrite` runs inside the write. */
function recorder(onWrite: (n: number) => void = () => {}) {
  const at: number[] = [];
  let ended!: () => void;
  const done = new Promise<void>((r) => (ended = r));
  const res = {
    write(_b: Buffer) {
      at.push(performance.now());
      onWrite(at.length);
      return true;
    },
    end() {
      ended();
    },
    once() {},
    socket: undefined,
  } as unknown as ServerResponse;
  const gaps = () => at.slice(1).map((t, i) => t - at[i]!);
  return { res, at, gaps, done };
}

function busyWait(ms: number) {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

describe('sliced output pacing', () => {
  it('a slice written late is followed at once by the slices that fell due meanwhile (no drift)', async () => {
    const r = recorder((n) => n === 2 && busyWait(6 * GAP_MS));
    const out = new SlicedOutput(r.res, { seed: 1, maxBytes: 1, gapMs: GAP_MS }, () => false);
    out.end('x'.repeat(12));
    await r.done;
    expect(r.at).toHaveLength(12);
    // Writing slice 2 blocked for six gaps: the slices due meanwhile follow slice 3 back to back
    // (the schedule that waited a gap after each write never wrote two slices within half a gap).
    // Three of the four, not all: on a loaded machine one may be kept off the CPU for a while.
    const backToBack = r.gaps().slice(2, 6).filter((g) => g < GAP_MS / 2);
    expect(backToBack.length).toBeGreaterThanOrEqual(3);
  });

  it('after the stream ran dry, new text starts a new run at the pace (no burst of slices that fell due while waiting)', async () => {
    // On a clock the test moves: on the real one, a tick a loaded box runs late is followed at once by
    // the slices that fell due meanwhile (the first test's catch-up), gaps this test would take for a burst.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'clearImmediate', 'performance'] });
    try {
      const r = recorder();
      const out = new SlicedOutput(r.res, { seed: 1, maxBytes: 1, gapMs: GAP_MS }, () => false);
      out.push('a');
      await vi.advanceTimersByTimeAsync(8 * GAP_MS);
      expect(r.at).toHaveLength(1);
      out.end('bcdef');
      await vi.runAllTimersAsync();
      await r.done;
      expect(r.at).toHaveLength(6);
      expect(r.gaps().slice(1).every((g) => g >= GAP_MS / 2)).toBe(true);
    } finally {
      vi.useRealTimers();
    }
  });
});
