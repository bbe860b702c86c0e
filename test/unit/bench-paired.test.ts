import { describe, expect, it } from 'vitest';
import { pairedMedianDiff } from '../../test/bench/latency.js';
import { compareStream, type StreamScenarioResult } from '../../test/bench/report.js';
import { targetRows, type SummaryInput } from '../../test/bench/summary.js';

const stats = (p50: number) => ({ n: 1, min: p50, mean: p50, p50, p90: p50, p99: p50, max: p50 });

/** A stream row whose k-th stream (request number seq[k]) took done[k] ms; first events 1 ms before. */
const row = (name: string, seq: number[], done: number[], p50: number): StreamScenarioResult =>
  ({
    name,
    ttfb: stats(p50 - 1),
    firstEvent: stats(p50 - 1),
    done: stats(p50),
    total: stats(p50),
    perChunk: stats(1),
    events: stats(36),
    cpuMsPerResp: {},
    cpuMsPerEvent: {},
    bySeq: { seq, firstEventMs: done.map((d) => d - 1), doneMs: done },
  }) as unknown as StreamScenarioResult;

describe('bench: paired differences between stream rows', () => {
  it('compares each request with the same request number of the other row, and takes the median', () => {
    const r = pairedMedianDiff({ seq: [0, 1, 2, 3], values: [30, 41, 52, 63] }, { seq: [0, 1, 2, 3], values: [29, 40, 50, 60] });
    // differences 1, 1, 2, 3: nearest-rank median 1
    expect(r).toEqual({ median: 1, pairs: 4 });
  });

  it('pairs by request number, not by position: a stream one row lost does not shift the others', () => {
    const r = pairedMedianDiff({ seq: [0, 2, 3], values: [31, 52, 62] }, { seq: [0, 1, 2, 3], values: [30, 40, 50, 60] });
    expect(r).toEqual({ median: 2, pairs: 3 }); // 1, 2, 2
  });

  it('skips unmeasured values and answers NaN with nothing in common', () => {
    expect(pairedMedianDiff({ seq: [0, 1], values: [NaN, 12] }, { seq: [0, 1], values: [9, 10] })).toEqual({ median: 2, pairs: 1 });
    expect(pairedMedianDiff({ seq: [5], values: [1] }, { seq: [6], values: [1] }).median).toBeNaN();
  });

  it('a comparison carries the paired medians beside the difference of the p50s', () => {
    // Streams of very different lengths: the p50s pick different streams (p50 diff 10 ms), each stream is 0.5 ms later.
    const bare = row('bare_stream_sliced', [0, 1, 2], [30, 40, 50], 40);
    const gw = row('credit_stream_sliced', [0, 1, 2], [30.5, 40.5, 50.5], 50);
    const c = compareStream([bare, gw], { name: 'x', what: 'x', num: 'credit_stream_sliced', den: 'bare_stream_sliced' })!;
    expect(c.addedDoneP50Ms).toBe(10);
    expect(c.pairedDoneMs).toBeCloseTo(0.5, 10);
    expect(c.pairedFirstEventMs).toBeCloseTo(0.5, 10);
    expect(c.pairs).toBe(3);
  });

  it('the sliced target rows are the paired medians; the unsliced ones stay the difference of the p50s', () => {
    const sliced = { seq: [0, 1, 2], slow: [30.5, 40.5, 50.5], floor: [30.2, 40.2, 50.2], bare: [30, 40, 50] };
    const streams = [
      row('bare_stream', [0, 1], [2, 2], 2),
      row('floor_stream', [0, 1], [3, 3], 3),
      row('credit_stream', [0, 1], [3.5, 3.5], 3.5),
      row('bare_stream_sliced', sliced.seq, sliced.bare, 40),
      row('floor_stream_sliced', sliced.seq, sliced.floor, 45),
      row('credit_stream_sliced', sliced.seq, sliced.slow, 50),
    ];
    const pairs = [
      ['credit_stream', 'bare_stream'],
      ['floor_stream', 'bare_stream'],
      ['credit_stream_sliced', 'bare_stream_sliced'],
      ['floor_stream_sliced', 'bare_stream_sliced'],
    ];
    const streamComparisons = pairs.map(([num, den]) => compareStream(streams, { name: `${num}-${den}`, what: '', num: num!, den: den! })!);
    const rows = targetRows({ gateway: 'credit', results: [], comparisons: [], streams, streamComparisons, memory: [] } as unknown as SummaryInput);
    const get = (prefix: string) => rows.find((r) => r.what.startsWith(prefix))!;
    expect(get('stream c=1 (0 ms): [DONE]').gateway).toBeCloseTo(1.5, 10);
    expect(get('stream c=1 (sliced): [DONE]').what).toContain('median per stream');
    expect(get('stream c=1 (sliced): [DONE]').gateway).toBeCloseTo(0.5, 10);
    expect(get('stream c=1 (sliced): [DONE]').floor).toBeCloseTo(0.2, 10);
    expect(get('stream c=1 (sliced): first complete event').gateway).toBeCloseTo(0.5, 10);
  });
});
