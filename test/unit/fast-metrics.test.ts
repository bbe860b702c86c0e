import { describe, expect, it } from 'vitest';
import { Counter, Histogram, Registry } from 'prom-client';
import { FastHistogram, FastValue } from '../../sidecar/src/adapters/fast-metrics.js';

/** The hot-path metrics must expose exactly what prom-client's own would, for the same events. */
describe('fast metrics', () => {
  it('a histogram exposes the same text as prom-client\'s', async () => {
    const fast = new Registry();
    const slow = new Registry();
    const buckets = [0.001, 0.01, 0.1, 1];
    const f = new FastHistogram('lat_seconds', 'latency', ['phase'], buckets, fast);
    const h = new Histogram({ name: 'lat_seconds', help: 'latency', labelNames: ['phase'], buckets, registers: [slow] });
    for (const [phase, v] of [['a', 0.0005], ['a', 0.001], ['a', 0.05], ['b', 3], ['a', 0.5], ['b', 0.01]] as const) {
      f.labels(phase).observe(v);
      h.labels(phase).observe(v);
    }
    expect(await fast.metrics()).toBe(await slow.metrics());
  });

  it('a counter with several labels exposes the same text as prom-client\'s, children exported from creation', async () => {
    const fast = new Registry();
    const slow = new Registry();
    const f = new FastValue('counter', 'req_total', 'requests', ['route', 'status'], fast);
    const c = new Counter({ name: 'req_total', help: 'requests', labelNames: ['route', 'status'], registers: [slow] });
    f.labels('chat', '200').value += 3;
    c.labels('chat', '200').inc(3);
    f.labels('models', '401').value++;
    c.labels('models', '401').inc();
    f.labels('chat', '200').value++;
    c.labels('chat', '200').inc();
    f.labels('usage', '200');
    c.labels('usage', '200').inc(0);
    expect(await fast.metrics()).toBe(await slow.metrics());
  });
});
