import type { Registry } from 'prom-client';

/**
 * Counters, gauges and histograms cheap enough for every request: a label
 * combination is one plain object found through nested maps, and recording a
 * value is an addition (prom-client's own children hash their labels on every
 * call, ~2 µs each). They plug into a prom-client Registry, which formats them
 * at scrape time like its own metrics.
 */

type Labels = Record<string, string>;
interface Sample {
  value: number;
  labels: Labels;
  metricName?: string;
}

abstract class FastMetric<C> {
  private readonly root = new Map<string, unknown>();
  protected readonly children: Array<{ labels: Labels; child: C }> = [];

  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: 'counter' | 'gauge' | 'histogram',
    private readonly labelNames: readonly string[],
    registry: Registry,
  ) {
    registry.registerMetric(this as never);
  }

  protected abstract create(): C;
  protected abstract samples(labels: Labels, child: C): Sample[];

  /** The child of these label values (in labelNames order), created on first use. */
  labels(...values: string[]): C {
    let node = this.root;
    const last = values.length - 1;
    for (let i = 0; i < last; i++) {
      let next = node.get(values[i] as string) as Map<string, unknown> | undefined;
      if (!next) node.set(values[i] as string, (next = new Map()));
      node = next;
    }
    const key = last < 0 ? '' : (values[last] as string);
    let child = node.get(key) as C | undefined;
    if (child === undefined) {
      child = this.create();
      node.set(key, child);
      this.children.push({ labels: Object.fromEntries(this.labelNames.map((n, i) => [n, values[i] as string])), child });
    }
    return child;
  }

  async get() {
    return { name: this.name, help: this.help, type: this.type, aggregator: 'sum', values: this.children.flatMap(({ labels, child }) => this.samples(labels, child)) };
  }

  reset(): void {}
}

export interface ValueChild {
  value: number;
}

/** A counter or a gauge: each child is one number. */
export class FastValue extends FastMetric<ValueChild> {
  constructor(type: 'counter' | 'gauge', name: string, help: string, labelNames: readonly string[], registry: Registry) {
    super(name, help, type, labelNames, registry);
  }
  protected create(): ValueChild {
    return { value: 0 };
  }
  protected samples(labels: Labels, c: ValueChild): Sample[] {
    return [{ labels, value: c.value }];
  }
}

export class HistogramChild {
  sum = 0;
  count = 0;
  readonly counts: Float64Array;
  constructor(private readonly bounds: readonly number[]) {
    this.counts = new Float64Array(bounds.length + 1);
  }
  observe(v: number): void {
    let i = 0;
    while (i < this.bounds.length && v > (this.bounds[i] as number)) i++;
    (this.counts as unknown as number[])[i]! += 1;
    this.sum += v;
    this.count += 1;
  }
}

export class FastHistogram extends FastMetric<HistogramChild> {
  constructor(name: string, help: string, labelNames: readonly string[], private readonly bounds: readonly number[], registry: Registry) {
    super(name, help, 'histogram', labelNames, registry);
  }
  protected create(): HistogramChild {
    return new HistogramChild(this.bounds);
  }
  protected samples(labels: Labels, h: HistogramChild): Sample[] {
    const out: Sample[] = [];
    let cumulative = 0;
    for (let i = 0; i <= this.bounds.length; i++) {
      cumulative += h.counts[i] as number;
      out.push({ metricName: `${this.name}_bucket`, labels: { le: i < this.bounds.length ? String(this.bounds[i]) : '+Inf', ...labels }, value: cumulative });
    }
    out.push({ metricName: `${this.name}_sum`, labels, value: h.sum }, { metricName: `${this.name}_count`, labels, value: h.count });
    return out;
  }
}
