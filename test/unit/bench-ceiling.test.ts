import { describe, expect, it } from 'vitest';
import { ceilingRows, ceilingTable, type SummaryInput } from '../../test/bench/summary.js';

const unary = (name: string, rps: number, cpuMsPerReq: Record<string, number>) => ({ name, throughput: { rps, cpuMsPerReq } });
const streamRow = (name: string, streamsPerS: number, cpuMsPerStream: Record<string, number>) => ({ name, load: { streamsPerS, cpuMsPerStream } });

const input = (over: Partial<SummaryInput> = {}): SummaryInput =>
  ({
    gateway: 'credit',
    results: [
      unary('bare', 10_000, { simulator: 0.05, 'envoy-bare': 0.05, bench: 0.02 }),
      unary('floor', 2_000, { simulator: 0.05, 'envoy-floor': 0.2, 'null-sidecar': 0.15, bench: 0.0, sidecar: NaN }),
      unary('gateway_credit', 1_000, { simulator: 0.05, envoy: 0.2, sidecar: 0.5, redis: 0.05, bench: 0.0 }),
    ],
    streams: [
      streamRow('bare_stream', 4_000, { simulator: 0.25, 'envoy-bare': 0.15, bench: 0.1 }),
      streamRow('floor_stream', 2_000, { simulator: 0.25, 'envoy-floor': 0.3, 'null-sidecar': 0.25, bench: 0.2 }),
      streamRow('credit_stream', 1_000, { simulator: 0.3, envoy: 0.4, sidecar: 0.8, redis: 0.1, bench: 0.4 }),
    ],
    comparisons: [],
    streamComparisons: [],
    memory: [],
    ...over,
  }) as unknown as SummaryInput;

describe('bench: what the cores allow', () => {
  it('ceiling = cores / the CPU of every process per request, as % of bare; measured as % of bare', () => {
    const [json, streams] = ceilingRows(input(), 2);
    // floor: 0.4 ms per request -> 5,000 req/s on 2 cores = 50 % of 10,000 (NaN entries ignored)
    expect(json!.floor.cpuMs).toBeCloseTo(0.4, 10);
    expect(json!.floor.ceilingPct).toBeCloseTo(50, 10);
    expect(json!.floor.measuredPct).toBeCloseTo(20, 10);
    // gateway: 0.8 ms -> 2,500 req/s = 25 %
    expect(json!.gateway.ceilingPct).toBeCloseTo(25, 10);
    expect(json!.gateway.measuredPct).toBeCloseTo(10, 10);
    expect(json!.target).toBe(25);
    // streams: floor 1.0 ms -> 2,000 = 50 % of 4,000; gateway 2.0 ms -> 1,000 = 25 %
    expect(streams!.floor.ceilingPct).toBeCloseTo(50, 10);
    expect(streams!.gateway.ceilingPct).toBeCloseTo(25, 10);
    expect(streams!.gateway.measuredPct).toBeCloseTo(25, 10);
    expect(streams!.target).toBe(90);
    // The sidecar's budget: 2 cores / (25 % of 10,000 req/s) = 0.8 ms for everything; the gateway's others spend 0.3.
    expect(json!.sidecarBudgetMs).toBeCloseTo(0.5, 10);
    expect(json!.nullSidecarMs).toBeCloseTo(0.15, 10);
    // Streams: 2,000 / (90 % of 4,000) = 0.5556 ms; others 1.2 ms: negative, over it before the sidecar runs.
    expect(streams!.sidecarBudgetMs).toBeCloseTo(2000 / 3600 - 1.2, 10);
  });

  it('scales with the cores', () => {
    expect(ceilingRows(input(), 4)[0]!.floor.ceilingPct).toBeCloseTo(100, 10);
  });

  it('the table says whether the floor can reach each target', () => {
    const text = ceilingTable(ceilingRows(input(), 2));
    const lines = text.split('\n');
    expect(lines.find((l) => l.startsWith('JSON c=16'))).toMatch(/yes +0\.500 ms \(0\.150 ms\)$/); // 50 % >= 25 %
    expect(lines.find((l) => l.startsWith('streams c=16'))).toMatch(/no +-0\.644 ms \(0\.250 ms\)$/); // 50 % < 90 %
  });

  it('rows that were not measured are n/a, not numbers', () => {
    const rows = ceilingRows(input({ results: [], streams: [] }), 2);
    expect(rows.every((r) => Number.isNaN(r.floor.ceilingPct) && Number.isNaN(r.gateway.measuredPct))).toBe(true);
    expect(ceilingTable(rows)).toContain('n/a');
  });

  it('judges the memory-store gateway when the credit one was not run', () => {
    const results = [...(input().results as unknown[]), unary('gateway', 500, { sidecar: 0.4, envoy: 0.2, simulator: 0.2 })];
    const [json] = ceilingRows(input({ gateway: 'gateway', results } as never), 2);
    expect(json!.gateway.cpuMs).toBeCloseTo(0.8, 10);
    expect(json!.gateway.measuredPct).toBeCloseTo(5, 10);
  });
});
