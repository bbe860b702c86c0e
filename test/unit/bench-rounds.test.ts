import { describe, expect, it } from 'vitest';
import { inRounds, interleaved, loadRounds, ThroughputTally, type AutocannonFigures } from '../bench/rounds.js';

function run(total: number, duration: number, p50: number, p99: number, extra: Partial<AutocannonFigures> = {}): AutocannonFigures {
  return {
    requests: { total } as AutocannonFigures['requests'],
    '2xx': total,
    non2xx: 0,
    '4xx': 0,
    '5xx': 0,
    errors: 0,
    timeouts: 0,
    duration,
    latency: { p50, p99 } as AutocannonFigures['latency'],
    ...extra,
  };
}

describe('bench rounds', () => {
  it('gives every target one turn per round, the order rotated by one each round', async () => {
    const order: string[] = [];
    await inRounds(3, 4, async (t, round) => {
      order.push(`${round}:${t}`);
    });
    expect(order).toEqual(['0:0', '0:1', '0:2', '1:1', '1:2', '1:0', '2:2', '2:0', '2:1', '3:0', '3:1', '3:2']);
  });

  it('splits the load seconds evenly over the rounds', async () => {
    const got: Array<[number, number]> = [];
    await loadRounds([0, 1].map((t) => async (s: number) => void got.push([t, s])), 5, 5);
    expect(got).toHaveLength(10);
    expect(got.every(([, s]) => s === 1)).toBe(true);
    expect(got.filter(([t]) => t === 0)).toHaveLength(5);
    const once: number[] = [];
    await loadRounds([async (s: number) => void once.push(s)], 5, 0);
    expect(once).toEqual([5]);
  });

  it('splits requests over the rounds with the rest in the last, never more rounds than requests', async () => {
    const got: number[][] = [[], []];
    await interleaved([0, 1].map((t) => async (n: number) => void got[t]!.push(n)), 11, 3);
    expect(got).toEqual([[3, 3, 5], [3, 3, 5]]);
    const few: number[] = [];
    await interleaved([async (n: number) => void few.push(n)], 2, 5);
    expect(few).toEqual([1, 1]);
  });

  it('sums a target over its slices: req/s over the summed time, CPU per request over all its requests', () => {
    const tally = new ThroughputTally();
    tally.add(run(1000, 1, 8, 20));
    tally.add(run(500, 1, 14, 40, { non2xx: 3, '5xx': 3, errors: 1, timeouts: 2 }));
    tally.add(run(1500, 1, 7, 30));
    tally.cpu.sidecar = 1500;
    const r = tally.result();
    expect(r.total).toBe(3000);
    expect(r.rps).toBe(1000);
    expect(r.durationS).toBe(3);
    expect([r.non2xx, r.s5xx, r.errors, r.timeouts]).toEqual([3, 3, 1, 2]);
    expect(r.p50).toBe(8);
    expect(r.p99).toBe(30);
    expect(r.cpuMsPerReq.sidecar).toBe(0.5);
  });

  it('reports nothing measured as NaN, not as zero', () => {
    const r = new ThroughputTally().result();
    expect(r.rps).toBeNaN();
    expect(r.p50).toBeNaN();
  });
});
