/**
 * Sequential latency client: one keep-alive connection, one request at a
 * time, each timed with process.hrtime from just before the request is
 * written until the last byte of the response body has arrived. Gives real
 * sub-millisecond resolution (autocannon's latency histogram is whole ms).
 */
import http from 'node:http';
import https from 'node:https';

export interface RequestSpec {
  readonly url: string;
  readonly method: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body?: string;
}

export interface LatencySample {
  /** Latencies (ms) of 2xx responses, in the order they were taken. */
  readonly okMs: number[];
  /** Responses with a status outside 2xx. */
  non2xx: number;
  /** Requests that failed without a response (socket error, timeout). */
  errors: number;
  /** Status code -> count, all responses. */
  readonly statuses: Record<number, number>;
  /** First non-2xx body or error message seen, for the report. */
  firstProblem: string | null;
}

export function emptySample(): LatencySample {
  return { okMs: [], non2xx: 0, errors: 0, statuses: {}, firstProblem: null };
}

export interface OneResult {
  readonly status: number;
  readonly ms: number;
  readonly body: string;
}

export class SequentialClient {
  private readonly agent: http.Agent;
  private readonly url: URL;
  private readonly body: Buffer | undefined;
  private readonly headers: Record<string, string | number>;

  constructor(
    readonly spec: RequestSpec,
    private readonly timeoutMs = 10_000,
  ) {
    this.url = new URL(spec.url);
    const Agent = this.url.protocol === 'https:' ? https.Agent : http.Agent;
    this.agent = new Agent({ keepAlive: true, maxSockets: 1, maxFreeSockets: 1 });
    this.body = spec.body === undefined ? undefined : Buffer.from(spec.body);
    this.headers = { ...spec.headers };
    if (this.body) this.headers['content-length'] = this.body.length;
  }

  /** One request; resolves with status, latency and body, rejects on a transport error. */
  one(): Promise<OneResult> {
    const mod = this.url.protocol === 'https:' ? https : http;
    return new Promise<OneResult>((resolve, reject) => {
      const t0 = process.hrtime.bigint();
      const req = mod.request(this.url, { method: this.spec.method, headers: this.headers, agent: this.agent }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const ms = Number(process.hrtime.bigint() - t0) / 1e6;
          resolve({ status: res.statusCode ?? 0, ms, body: Buffer.concat(chunks).toString('utf8') });
        });
        res.on('error', reject);
      });
      req.setTimeout(this.timeoutMs, () => req.destroy(new Error(`timeout after ${this.timeoutMs} ms`)));
      req.on('error', reject);
      req.end(this.body);
    });
  }

  /** n sequential requests, added to `into`. */
  async run(n: number, into: LatencySample = emptySample()): Promise<LatencySample> {
    for (let i = 0; i < n; i++) {
      try {
        const r = await this.one();
        into.statuses[r.status] = (into.statuses[r.status] ?? 0) + 1;
        if (r.status >= 200 && r.status < 300) {
          into.okMs.push(r.ms);
        } else {
          into.non2xx++;
          into.firstProblem ??= `HTTP ${r.status}: ${r.body.slice(0, 300)}`;
        }
      } catch (err) {
        into.errors++;
        into.firstProblem ??= `error: ${(err as Error).message}`;
      }
    }
    return into;
  }

  close(): void {
    this.agent.destroy();
  }
}

export interface LatencyStats {
  readonly n: number;
  readonly min: number;
  readonly mean: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
}

/** Nearest-rank percentile of an ascending array. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1] ?? NaN;
}

export function latencyStats(ms: readonly number[]): LatencyStats {
  const s = [...ms].sort((a, b) => a - b);
  const sum = s.reduce((a, b) => a + b, 0);
  return {
    n: s.length,
    min: s[0] ?? NaN,
    mean: s.length ? sum / s.length : NaN,
    p50: percentile(s, 50),
    p90: percentile(s, 90),
    p99: percentile(s, 99),
    max: s[s.length - 1] ?? NaN,
  };
}
