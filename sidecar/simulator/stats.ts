/**
 * What the simulator saw, for tests: request counts by path, a ring buffer of
 * recent requests, stream outcomes and client cancellations. Recording keeps
 * references only (no copying) so it stays off the hot path's bill.
 */
import type { IncomingHttpHeaders } from 'node:http';

export const RECENT_LIMIT = 200;
const AUTH_SEEN_LIMIT = 100;

export interface RecordedRequest {
  readonly seq: number;
  /** Epoch milliseconds. */
  readonly at: number;
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: unknown;
}

export interface Cancellation {
  readonly at: number;
  readonly path: string;
  readonly model: string;
  /** Content words (tokens) already sent when the client went away. */
  readonly contentTokensSent: number;
  readonly reasoningTokensSent: number;
  /** All chunks sent, role chunk included. */
  readonly chunksSent: number;
}

/** TLS connections (HTTPS simulator only): proof that a refused handshake happened and carried no request. */
export interface TlsStats {
  /** TCP connections accepted on the TLS port. */
  connections: number;
  /** Handshakes completed. */
  handshakes: number;
  /** Handshakes that failed (the client refused the certificate, or sent none when one is required). */
  failedHandshakes: number;
  /** SNI names sent by clients (first 100 distinct). */
  serverNames: string[];
  /** TLS versions of completed handshakes (distinct), e.g. "TLSv1.3". */
  versions: string[];
}

export interface StatsSnapshot {
  totalRequests: number;
  tls: TlsStats;
  requestsByPath: Record<string, number>;
  /** Oldest first, at most 200. */
  recent: Array<RecordedRequest & { authorization: string | null; xApiKey: string | null }>;
  /** Distinct Authorization / X-API-Key header values seen (first 100 of each). */
  authSeen: { authorization: string[]; xApiKey: string[] };
  streams: { started: number; completed: number; cancelled: number; active: number };
  cancelledStreams: number;
  /** Oldest first, at most 200. */
  cancellations: Cancellation[];
}

function headerValue(v: string | string[] | undefined): string | null {
  if (v === undefined) return null;
  return Array.isArray(v) ? v.join(', ') : v;
}

export class SimulatorStats {
  totalRequests = 0;
  readonly byPath = new Map<string, number>();
  streamsStarted = 0;
  streamsCompleted = 0;
  cancelledStreams = 0;
  activeStreams = 0;
  private ring: Array<RecordedRequest | undefined> = new Array(RECENT_LIMIT);
  private seq = 0;
  private cancels: Cancellation[] = [];
  private authorization = new Set<string>();
  private xApiKey = new Set<string>();
  readonly tls: TlsStats = { connections: 0, handshakes: 0, failedHandshakes: 0, serverNames: [], versions: [] };

  tlsConnection(): void {
    this.tls.connections++;
  }

  tlsHandshake(serverName: string | false | null | undefined, ok: boolean, version: string | null = null): void {
    if (ok) this.tls.handshakes++;
    else this.tls.failedHandshakes++;
    if (version !== null && !this.tls.versions.includes(version)) this.tls.versions.push(version);
    if (typeof serverName === 'string' && !this.tls.serverNames.includes(serverName) && this.tls.serverNames.length < AUTH_SEEN_LIMIT) {
      this.tls.serverNames.push(serverName);
    }
  }

  record(method: string, path: string, headers: IncomingHttpHeaders, body: unknown): void {
    this.totalRequests++;
    this.byPath.set(path, (this.byPath.get(path) ?? 0) + 1);
    const seq = ++this.seq;
    this.ring[seq % RECENT_LIMIT] = { seq, at: Date.now(), method, path, headers, body: body ?? null };
    const auth = headers.authorization;
    if (auth !== undefined && this.authorization.size < AUTH_SEEN_LIMIT) this.authorization.add(auth);
    const key = headerValue(headers['x-api-key']);
    if (key !== null && this.xApiKey.size < AUTH_SEEN_LIMIT) this.xApiKey.add(key);
  }

  streamStarted(): void {
    this.streamsStarted++;
    this.activeStreams++;
  }

  /** A stream ended: finished (sent everything), or cancelled by the client. */
  streamEnded(outcome: 'completed' | 'aborted' | Omit<Cancellation, 'at'>): void {
    this.activeStreams--;
    if (outcome === 'completed') this.streamsCompleted++;
    else if (outcome !== 'aborted') {
      this.cancelledStreams++;
      this.cancels.push({ at: Date.now(), ...outcome });
      if (this.cancels.length > RECENT_LIMIT) this.cancels.shift();
    }
  }

  /** Recorded requests, oldest first, optionally only those for `path`. */
  requests(path?: string): RecordedRequest[] {
    const out: RecordedRequest[] = [];
    for (let s = Math.max(1, this.seq - RECENT_LIMIT + 1); s <= this.seq; s++) {
      const r = this.ring[s % RECENT_LIMIT];
      if (r && (path === undefined || r.path === path)) out.push(r);
    }
    return out;
  }

  lastRequest(path?: string): RecordedRequest | undefined {
    return this.requests(path).at(-1);
  }

  get cancellations(): readonly Cancellation[] {
    return this.cancels;
  }

  snapshot(): StatsSnapshot {
    return {
      totalRequests: this.totalRequests,
      tls: { ...this.tls, serverNames: [...this.tls.serverNames], versions: [...this.tls.versions] },
      requestsByPath: Object.fromEntries(this.byPath),
      recent: this.requests().map((r) => ({
        ...r,
        authorization: headerValue(r.headers.authorization),
        xApiKey: headerValue(r.headers['x-api-key']),
      })),
      authSeen: { authorization: [...this.authorization], xApiKey: [...this.xApiKey] },
      streams: {
        started: this.streamsStarted,
        completed: this.streamsCompleted,
        cancelled: this.cancelledStreams,
        active: this.activeStreams,
      },
      cancelledStreams: this.cancelledStreams,
      cancellations: [...this.cancels],
    };
  }

  /** Clears everything except the count of streams still running. */
  reset(): void {
    this.totalRequests = 0;
    this.byPath.clear();
    this.streamsStarted = this.activeStreams;
    this.streamsCompleted = 0;
    this.cancelledStreams = 0;
    this.ring = new Array(RECENT_LIMIT);
    this.seq = 0;
    this.cancels = [];
    this.authorization.clear();
    this.xApiKey.clear();
    Object.assign(this.tls, { connections: 0, handshakes: 0, failedHandshakes: 0, serverNames: [], versions: [] });
  }
}
