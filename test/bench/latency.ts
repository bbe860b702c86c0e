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
  /**
   * The body of a client's n-th request (from 0), in place of `body`, for requests
   * that must differ in a known order: every target's k-th sliced stream carries
   * the same slice seed, so all targets see the same slicing (StreamClient).
   */
  readonly bodyOf?: (n: number) => string;
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
  /** process.hrtime.bigint() (CLOCK_MONOTONIC, ns) just before the request was written and at its last byte. */
  readonly sentNs: bigint;
  readonly doneNs: bigint;
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
          const t1 = process.hrtime.bigint();
          resolve({ status: res.statusCode ?? 0, ms: Number(t1 - t0) / 1e6, body: Buffer.concat(chunks).toString('utf8'), sentNs: t0, doneNs: t1 });
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

/** One streamed response, timed from just before the request is written. */
export interface StreamResult {
  readonly status: number;
  /** Request written -> first body byte. */
  readonly ttfbMs: number;
  /** Request written -> last body byte. */
  readonly totalMs: number;
  /** Request written -> the read that completed the first `data: {...}` event whose JSON parses (what an SDK can use); NaN if none. */
  readonly firstEventMs: number;
  /** Request written -> the read that completed `data: [DONE]\n\n`; NaN if it never came. */
  readonly doneMs: number;
  /** (last body byte - first body byte) / (events - 1); NaN with fewer than 2 events. */
  readonly perChunkMs: number;
  /** `data:` events in the body (including `data: [DONE]`). */
  readonly events: number;
  /** Body reads (socket chunks) the client saw: fewer than events means events arrived coalesced. */
  readonly reads: number;
  readonly body: string;
  /** This client's request number (0, 1, ...): requests with the same number carry the same body (`RequestSpec.bodyOf`). */
  readonly seq: number;
}

export interface StreamSample {
  readonly ttfbMs: number[];
  readonly totalMs: number[];
  readonly firstEventMs: number[];
  readonly doneMs: number[];
  readonly perChunkMs: number[];
  readonly events: number[];
  readonly reads: number[];
  /** The client's request number of each measured stream (StreamResult.seq), in the order of the arrays above. */
  readonly seq: number[];
  non2xx: number;
  errors: number;
  /** Responses whose body failed the scenario's check (counted apart from non2xx). */
  bad: number;
  readonly statuses: Record<number, number>;
  firstProblem: string | null;
  /** CPU ms spent during this sample's runs, by process (summed over the runs). */
  readonly cpuMs: Record<string, number>;
}

export function emptyStreamSample(): StreamSample {
  return { ttfbMs: [], totalMs: [], firstEventMs: [], doneMs: [], perChunkMs: [], events: [], reads: [], seq: [], non2xx: 0, errors: 0, bad: 0, statuses: {}, firstProblem: null, cpuMs: {} };
}

/** `data:` lines at the start of a line (SSE events carrying data). */
export function countDataEvents(body: string): number {
  let n = 0;
  let i = 0;
  for (;;) {
    const j = body.indexOf('data:', i);
    if (j < 0) return n;
    if (j === 0 || body[j - 1] === '\n') n++;
    i = j + 5;
  }
}

const DONE_EVENT = 'data: [DONE]\n\n';

/**
 * Watches a stream's reads for the two moments a client cares about: the
 * first complete event an SDK can parse (a `data: {...}` line whose JSON
 * parses, its blank line arrived; however the bytes were sliced) and the
 * complete `data: [DONE]` event. Scans only until each is found.
 */
export class EventClock {
  firstEvent = 0n;
  done = 0n;
  private pending = '';
  private tail = '';

  read(chunk: Buffer, at: bigint): void {
    const text = chunk.toString('latin1'); // the markers are ASCII; the JSON is decoded as UTF-8 below
    if (this.firstEvent === 0n) {
      this.pending += text;
      let end: number;
      while (this.firstEvent === 0n && (end = this.pending.indexOf('\n\n')) >= 0) {
        const block = this.pending.slice(0, end);
        this.pending = this.pending.slice(end + 2);
        if (parsesAsEvent(block)) this.firstEvent = at;
      }
      if (this.firstEvent !== 0n) this.pending = '';
    }
    if (this.done === 0n) {
      this.tail = (this.tail + text).slice(-(DONE_EVENT.length + 2));
      if (this.tail.includes(DONE_EVENT)) this.done = at;
    }
  }
}

/** An SSE event block with a `data: {...}` line that parses as JSON. */
function parsesAsEvent(block: string): boolean {
  for (const line of block.split('\n')) {
    if (!line.startsWith('data:')) continue;
    const payload = Buffer.from(line.slice(5).trim(), 'latin1').toString('utf8');
    if (!payload.startsWith('{')) continue;
    try {
      JSON.parse(payload);
      return true;
    } catch {
      return false;
    }
  }
  return false;
}

/**
 * Sequential streaming client: one keep-alive connection, one request at a
 * time; hrtime at the write, at the first body byte, at the read that
 * completes the first parseable event, at the one that completes
 * `data: [DONE]` and at the last body byte. The rest of the body is only
 * parsed (events counted) after the last byte has arrived.
 */
export class StreamClient {
  private readonly agent: http.Agent;
  private readonly url: URL;
  private readonly body: Buffer | undefined;
  private readonly headers: Record<string, string | number>;
  private sent = 0;

  constructor(
    readonly spec: RequestSpec,
    private readonly check: (status: number, body: string, events: number) => string | null,
    private readonly timeoutMs = 30_000,
  ) {
    this.url = new URL(spec.url);
    const Agent = this.url.protocol === 'https:' ? https.Agent : http.Agent;
    this.agent = new Agent({ keepAlive: true, maxSockets: 1, maxFreeSockets: 1 });
    this.body = spec.body === undefined ? undefined : Buffer.from(spec.body);
    this.headers = { ...spec.headers };
    if (this.body) this.headers['content-length'] = this.body.length;
  }

  one(): Promise<StreamResult> {
    const mod = this.url.protocol === 'https:' ? https : http;
    const seq = this.sent++;
    const body = this.spec.bodyOf ? Buffer.from(this.spec.bodyOf(seq)) : this.body;
    const headers = body ? { ...this.headers, 'content-length': body.length } : this.headers;
    return new Promise<StreamResult>((resolve, reject) => {
      const t0 = process.hrtime.bigint();
      let first = 0n;
      let last = 0n;
      let reads = 0;
      const clock = new EventClock();
      const req = mod.request(this.url, { method: this.spec.method, headers, agent: this.agent }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => {
          last = process.hrtime.bigint();
          if (reads++ === 0) first = last;
          clock.read(c, last);
          chunks.push(c);
        });
        res.on('end', () => {
          const body = Buffer.concat(chunks).toString('utf8');
          const events = countDataEvents(body);
          const ms = (t: bigint) => Number(t - t0) / 1e6;
          resolve({
            status: res.statusCode ?? 0,
            ttfbMs: reads > 0 ? ms(first) : NaN,
            totalMs: reads > 0 ? ms(last) : NaN,
            firstEventMs: clock.firstEvent > 0n ? ms(clock.firstEvent) : NaN,
            doneMs: clock.done > 0n ? ms(clock.done) : NaN,
            perChunkMs: events > 1 ? Number(last - first) / 1e6 / (events - 1) : NaN,
            events,
            reads,
            body,
            seq,
          });
        });
        res.on('error', reject);
      });
      req.setTimeout(this.timeoutMs, () => req.destroy(new Error(`timeout after ${this.timeoutMs} ms`)));
      req.on('error', reject);
      req.end(body);
    });
  }

  /** n sequential requests, added to `into`; a 2xx response that fails the check counts as bad, not measured. */
  async run(n: number, into: StreamSample = emptyStreamSample()): Promise<StreamSample> {
    for (let i = 0; i < n; i++) {
      try {
        const r = await this.one();
        into.statuses[r.status] = (into.statuses[r.status] ?? 0) + 1;
        if (r.status < 200 || r.status >= 300) {
          into.non2xx++;
          into.firstProblem ??= `HTTP ${r.status}: ${r.body.slice(0, 300)}`;
          continue;
        }
        const problem = this.check(r.status, r.body, r.events);
        if (problem) {
          into.bad++;
          into.firstProblem ??= problem;
          continue;
        }
        into.ttfbMs.push(r.ttfbMs);
        into.totalMs.push(r.totalMs);
        into.firstEventMs.push(r.firstEventMs);
        into.doneMs.push(r.doneMs);
        into.perChunkMs.push(r.perChunkMs);
        into.events.push(r.events);
        into.reads.push(r.reads);
        into.seq.push(r.seq);
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

/**
 * The median of the differences a − b between the measurements of the same request
 * number in two samples (requests with the same number carry the same body: for sliced
 * streams, the same slicing), over the numbers both measured; NaN when none is common.
 * Where the requests of a sample differ by design (sliced streams of 28 to 49 slices),
 * the difference of two p50s compares whichever stream is in the middle of each; this
 * compares each stream with itself.
 */
export function pairedMedianDiff(a: { readonly seq: readonly number[]; readonly values: readonly number[] }, b: { readonly seq: readonly number[]; readonly values: readonly number[] }): { readonly median: number; readonly pairs: number } {
  const bySeq = new Map<number, number>();
  b.seq.forEach((n, i) => bySeq.set(n, b.values[i]!));
  const diffs: number[] = [];
  a.seq.forEach((n, i) => {
    const other = bySeq.get(n);
    const mine = a.values[i]!;
    if (other !== undefined && Number.isFinite(other) && Number.isFinite(mine)) diffs.push(mine - other);
  });
  diffs.sort((x, y) => x - y);
  return { median: diffs.length ? percentile(diffs, 50) : NaN, pairs: diffs.length };
}
