import type { Catalog } from './catalog.js';
import { admitBody, type AdmissionPolicy } from './admission.js';
import type { AdmissionCache } from './admission-cache.js';
import { rewriteChatCompletion } from './chat-response.js';
import { rewriteEmbeddings } from './embeddings-response.js';
import { Errors, envelope, gatewayError, type ErrorEntry, type GatewayError } from './errors.js';
import type { Principal } from './auth/principal.js';
import { pathOnly } from './auth/routes.js';
import type { InferenceContext } from './request-context.js';
import { ChatStreamRewriter } from './sse/chat-stream.js';
import type { Usage } from './usage.js';
import type { LeaseCommitment } from '../store/ledger-contract.js';

/**
 * One HTTP exchange as the gateway sees it, from request headers to the end
 * of the response. Pure: it takes plain values and answers with actions; the
 * ext_proc adapter turns those into Envoy messages.
 */

export interface HeaderEdit {
  readonly set: Readonly<Record<string, string>>;
  readonly remove: readonly string[];
}

export type Action =
  | {
      readonly kind: 'continue';
      readonly headers?: HeaderEdit;
      readonly body?: Buffer;
      /** A piece of a response processed in full duplex (an SSE stream, or a JSON answer whole at its end); endOfStream closes it. */
      readonly streamed?: { readonly endOfStream: boolean };
    }
  | { readonly kind: 'reply'; readonly status: number; readonly body: string; readonly headers: Readonly<Record<string, string>> };

export interface ExchangeDeps {
  readonly brand: string;
  readonly apiPrefix: string;
  readonly catalog: Catalog;
  readonly admission: AdmissionPolicy;
  /** ext_authz's admission of this very body, when it ran in this process. */
  readonly admissions?: AdmissionCache;
  readonly identityProvider: () => Record<string, unknown>;
  /** The largest JSON answer the sidecar collects from the provider (limits.maxResponseBytes); above it, a 502. */
  readonly maxResponseBytes: number;
  /** GET /usage for a principal: the report body, or a refusal. */
  readonly usage: (principal: Principal, query: string, requestId: string) => Promise<{ ok: true; body: string } | { ok: false; error: GatewayError }>;
}

/** What the gate (ext_authz) decided: who asked and what it held. */
export interface GateDecision {
  readonly principal: Principal | null;
  /** Micro-units held by the gate for this request; null: nothing was held. */
  readonly held: number | null;
  /** The hold came out of a credit lease: it is confirmed before the request goes on. */
  readonly leased?: boolean;
  /** The credit lease the request is committed in (no hold of its own yet). */
  readonly lease?: string | null;
}

/** The request and the gate's decision, as the exchange learns them. */
export interface ExchangeStart extends GateDecision {
  readonly method: string;
  readonly path: string;
  readonly requestId: string;
}

/** The credit hold an exchange settles or releases. */
export interface ExchangeHold {
  readonly tenantId: string;
  readonly requestId: string;
  readonly leased: boolean;
  /** Committed inside this credit lease, for the worst case the gate held (see Billing.claim). */
  readonly lease: LeaseCommitment | null;
}

/** How an exchange ended: logged, and settled or released by billing. */
export interface ExchangeSummary {
  readonly requestId: string;
  readonly method: string;
  readonly path: string;
  readonly status: number | null;
  readonly principal: Principal | null;
  readonly alias: string | null;
  readonly stream: boolean;
  readonly usage: Usage | null;
  /** interrupted: the stream ended early (client went away or the provider broke off). */
  readonly outcome: 'ok' | 'refused' | 'upstream_error' | 'interrupted' | 'incomplete';
  readonly requestCount: number;
  readonly errorCode: string | null;
  /** The provider's HTTP status (or that of an Envoy reply standing in for it). */
  readonly upstreamStatus: number | null;
  /** Micro-units the gate held; null when nothing was held. */
  readonly held: number | null;
  readonly startedAt: number;
  /** What to bill: null when nothing was delivered (the hold is released). */
  readonly billable: Usage | null;
  readonly ctx: InferenceContext | null;
  readonly timings: ExchangeTimings;
  /** What the path asked for (metrics label; `unknown` for a route miss). */
  readonly route: ExchangeRoute;
}

/** Milliseconds from the start of the exchange (ext_proc's first message); null: the phase did not happen. */
export interface ExchangeTimings {
  /** Until the provider's response headers arrived. */
  readonly requestMs: number | null;
  /** Until the first event of a streamed response went to the caller. */
  readonly firstEventMs: number | null;
  /** From the provider's response headers to the end of the response. */
  readonly responseMs: number | null;
  readonly totalMs: number;
}

const JSON_HEADERS = { 'content-type': 'application/json' } as const;
const EMPTY = Buffer.alloc(0);

/** Provider response headers the caller may see; every other one is removed. */
const RESPONSE_HEADERS_KEPT = new Set([':status', 'content-type', 'content-length', 'date', 'cache-control', 'transfer-encoding', 'vary', 'connection']);

export type ExchangeRoute = 'chat' | 'embeddings' | 'models' | 'whoami' | 'usage' | 'unknown';
type Route = ExchangeRoute;

export class Exchange {
  private requestId = '';
  private method = '';
  private path = '';
  private route: Route = 'unknown';
  private principal: Principal | null = null;
  private ctx: InferenceContext | null = null;
  private stream: ChatStreamRewriter | null = null;
  private responseChunks: Buffer[] = [];
  private responseBytes = 0;
  /** A JSON answer is arriving: the caller's headers wait for its end (they carry its content-length). */
  private collecting = false;
  private status: number | null = null;
  private usage: Usage | null = null;
  private outcome: ExchangeSummary['outcome'] = 'incomplete';
  private errorCode: string | null = null;
  private upstreamStatus: number | null = null;
  private held: number | null = null;
  private leased = false;
  private lease: string | null = null;
  private startedAt = Date.now();
  /** Monotonic clock readings for the phase timings. */
  private readonly t0 = performance.now();
  private responseAt: number | null = null;
  private firstEventAt: number | null = null;

  constructor(private readonly deps: ExchangeDeps) {}

  /** The request's start in Unix seconds: a rewritten answer's `created` when the provider gives none. */
  private get createdSecond(): number {
    return Math.floor(this.startedAt / 1000);
  }

  get started(): boolean {
    return this.requestId !== '';
  }

  /** The credit hold this exchange must settle or release, once it has started with one. */
  get hold(): ExchangeHold | null {
    if (this.held === null || !this.principal) return null;
    return { tenantId: this.principal.tenantId, requestId: this.requestId, leased: this.leased, lease: this.lease ? { id: this.lease, amount: this.held } : null };
  }

  /** The gate's decision for this request when ext_authz ran in this process (else read what Envoy forwards). */
  decidedHere(requestId: string): GateDecision | undefined {
    return this.deps.admissions?.decisionOf(requestId);
  }

  /** Learns the request (from its headers, or from attributes when headers are not sent). */
  start(h: ExchangeStart): void {
    this.requestId = h.requestId;
    this.method = h.method;
    this.path = pathOnly(h.path);
    this.principal = h.principal;
    this.held = h.held;
    this.leased = h.leased === true;
    this.lease = h.lease ?? null;
    this.route = this.routeOf(this.path);
  }

  /** Paths answered by the gateway itself (GET /models, /whoami, /usage). */
  requestHeaders(h: ExchangeStart): Action | Promise<Action> {
    this.start(h);
    // A route miss reaches ext_proc without an ext_authz check: answer it as one.
    if (this.route === 'unknown') return this.refuse(Errors.notFound);
    if (!this.principal) return this.refuse(Errors.invalidApiKey);
    if (h.method !== 'GET') return this.refuse(Errors.methodNotAllowed);
    switch (this.route) {
      case 'models':
        return this.modelsReply();
      case 'whoami':
        return this.ok(JSON.stringify(this.whoami()));
      case 'usage': {
        const q = h.path.indexOf('?');
        return this.deps
          .usage(this.principal, q < 0 ? '' : h.path.slice(q + 1), this.requestId)
          .then((r) => (r.ok ? this.ok(r.body) : this.refuseWith(r.error)));
      }
      default:
        // chat/embeddings never send headers here (their body is processed); usage is served elsewhere.
        return this.refuse(Errors.notFound);
    }
  }

  /**
   * The hold the gate moved out of a credit lease is not in the store, and holding it
   * directly was refused (or the store could not say): not served (fails closed). The
   * hold is still released at the end, in case it was written after all.
   */
  holdUnconfirmed(error: GatewayError): Action {
    return this.refuseWith(error);
  }

  /** A chat or embeddings body the gate admitted and priced: rewrite it for the provider. */
  requestBody(body: Buffer): Action {
    const endpoint = this.route === 'chat' || this.route === 'embeddings' ? this.route : null;
    if (!endpoint || !this.principal) return this.refuse(Errors.notFound);
    // Nothing held means nothing can be metered: not served (fails closed).
    if (this.held === null) return this.refuse(Errors.creditsUnavailable);
    const admission = this.deps.admissions?.take(this.requestId, body) ?? admitBody(endpoint, this.method, body, this.deps.admission);
    if (!admission.ok) return this.refuseWith(admission.error);
    this.ctx = admission.ctx;
    const out = admission.upstreamBody;
    return { kind: 'continue', body: out, headers: { set: { 'content-length': String(out.length) }, remove: [] } };
  }

  responseHeaders(status: number, headerNames: readonly string[], contentType: string | undefined, endOfStream = false): Action {
    this.upstreamStatus = status;
    this.responseAt = performance.now();
    // A reply that never reached this exchange's request phase passes by untouched (Envoy skips
    // ext_proc for refusals; an admitted request's reply made before that phase can still come).
    if (!this.requestId) return { kind: 'continue' };
    const ctx = this.ctx;
    // No body at all is a failed delivery too (spec: an empty 502 body has been seen in outages).
    if (!ctx || status < 200 || status >= 300 || endOfStream) return this.upstreamFailed();
    const remove = headerNames.filter((n) => !RESPONSE_HEADERS_KEPT.has(n));
    if (ctx.stream) {
      if (!contentType?.startsWith('text/event-stream')) return this.upstreamFailed();
      this.stream = new ChatStreamRewriter(ctx, this.requestId, this.deps.brand, ctx.promptEstimate, this.createdSecond);
      return { kind: 'continue', headers: { set: {}, remove: [...remove, 'content-length'] } };
    }
    this.collecting = true;
    return { kind: 'continue', headers: { set: {}, remove } };
  }

  responseBody(chunk: Buffer, endOfStream: boolean): Action {
    // ... and its body, too: echoed piece by piece (full duplex).
    if (!this.requestId) return { kind: 'continue', body: chunk, streamed: { endOfStream } };
    const ctx = this.ctx;
    if (!ctx) return this.upstreamFailed();
    if (this.stream) {
      if (this.streamClosed) return { kind: 'continue' }; // a re-delivered last chunk (envoyproxy/envoy#46237)
      const out = endOfStream ? Buffer.concat([this.stream.push(chunk), this.stream.end()]) : this.stream.push(chunk);
      if (!this.delivered && this.stream.failedUpstream) {
        // The provider failed before the caller got a single event: a clean 502, nothing charged.
        this.streamClosed = true;
        return this.upstreamFailed();
      }
      if (out.length > 0 && !this.delivered) {
        this.delivered = true;
        this.firstEventAt = performance.now();
        this.status = 200; // the caller's headers go out with this first event
      }
      if (endOfStream) this.finishStream();
      return { kind: 'continue', body: out, streamed: { endOfStream } };
    }
    if (!this.collecting) return { kind: 'continue' }; // a re-delivered last chunk, as for streams
    this.responseChunks.push(chunk);
    this.responseBytes += chunk.length;
    if (this.responseBytes > this.deps.maxResponseBytes) {
      this.collecting = false;
      this.responseChunks = [];
      return this.upstreamFailed();
    }
    // Full duplex: the provider's pieces are collected here and need no answer until the last.
    if (!endOfStream) return { kind: 'continue', body: EMPTY, streamed: { endOfStream: false } };
    this.collecting = false;
    const raw = this.responseChunks.length === 1 ? (this.responseChunks[0] as Buffer) : Buffer.concat(this.responseChunks);
    this.responseChunks = [];
    const rewritten =
      ctx.endpoint === 'chat'
        ? rewriteChatCompletion(raw, ctx, this.requestId, this.deps.brand, this.createdSecond)
        : rewriteEmbeddings(raw, ctx, this.requestId, this.deps.brand);
    if (!rewritten.ok) return this.upstreamFailed();
    this.status = 200;
    this.outcome = 'ok';
    this.usage = rewritten.usage;
    const body = typeof rewritten.body === 'string' ? Buffer.from(rewritten.body) : rewritten.body;
    // The content-length goes out with the caller's headers, which were kept back until now.
    return { kind: 'continue', body, headers: { set: { 'content-length': String(body.length) }, remove: [] }, streamed: { endOfStream: true } };
  }

  /** True while a streamed response is flowing (the adapter watches it for stalls). */
  get streaming(): boolean {
    return this.stream !== null && !this.streamClosed;
  }

  /** The caller's stream has received its last event: nothing that follows changes what it reads. */
  get callerStreamEnded(): boolean {
    return this.stream !== null && this.stream.ended;
  }

  /**
   * A streamed response with nothing for the caller yet: the provider has sent
   * its headers but no event (it is still on the first token). The adapter
   * keeps the caller's headers back meanwhile: until the first event the
   * answer is not committed, so a provider that breaks off, falls silent or
   * fails can still be a clean 502.
   */
  get awaitingFirstEvent(): boolean {
    return this.streaming && !this.delivered;
  }

  /**
   * The answer to the provider's headers must wait: a stream's until its first
   * event, a JSON answer's until its last byte (its rewritten length is the
   * caller's content-length, and a bad answer can still be a clean 502).
   */
  get holdsResponseHeaders(): boolean {
    return this.awaitingFirstEvent || this.collecting;
  }

  /**
   * The provider went silent: before its first event, the 502 envelope; mid-stream,
   * one error event (the envelope with the request id) ends the caller's stream
   * instead of letting it hang.
   */
  streamStalled(): Action {
    return this.endStreamNow(Errors.upstreamError);
  }

  /**
   * Ends a streamed response now with `reason`: before the first event as that
   * error's reply (nothing charged), mid-stream as one error event (the envelope,
   * no [DONE]), charged for what was delivered. Used for a provider that fell
   * silent and for a stream still open at a stop's drain deadline.
   */
  endStreamNow(reason: ErrorEntry): Action {
    if (!this.stream || this.streamClosed) return { kind: 'continue' };
    if (!this.delivered) {
      this.streamClosed = true;
      return this.refuse(reason);
    }
    const out = Buffer.from(this.stream.fail(reason));
    this.finishStream(reason);
    return { kind: 'continue', body: out, streamed: { endOfStream: true } };
  }

  /** Envoy closed the stream before the response ended: the client went away or the provider broke off. */
  abandon(): void {
    if (this.stream && !this.streamClosed && this.outcome === 'incomplete') {
      // Before the first event the caller got nothing (Envoy answers 502, or the client
      // had left): like a JSON request whose client left, nothing is charged.
      if (this.delivered) this.usage = this.stream.usage();
      this.outcome = 'interrupted';
    }
  }

  summary(): ExchangeSummary {
    const now = performance.now();
    return {
      requestId: this.requestId,
      method: this.method,
      path: this.path,
      status: this.status,
      principal: this.principal,
      alias: this.ctx?.resolved.alias ?? null,
      stream: this.ctx?.stream ?? false,
      usage: this.usage,
      outcome: this.outcome,
      requestCount: this.ctx?.requestCount ?? 0,
      errorCode: this.errorCode,
      upstreamStatus: this.upstreamStatus,
      held: this.held,
      startedAt: this.startedAt,
      billable: this.billable(),
      ctx: this.ctx,
      route: this.route,
      timings: {
        requestMs: this.responseAt === null ? null : this.responseAt - this.t0,
        firstEventMs: this.firstEventAt === null ? null : this.firstEventAt - this.t0,
        responseMs: this.responseAt === null ? null : now - this.responseAt,
        totalMs: now - this.t0,
      },
    };
  }

  /**
   * What the request costs: the provider's usage when it came, else the
   * gateway's count (marked estimated). A stream the client abandoned is
   * charged for the prompt and what was delivered; a stream the provider
   * broke off, for what was delivered, if anything; a stream that ended
   * before its first event reached the caller, nothing. A request that delivered
   * nothing (a provider failure, a refusal, a JSON request whose client left
   * before the answer) is not charged: its hold is released.
   */
  private billable(): Usage | null {
    const u = this.usage;
    if (!this.ctx || !u) return null;
    return this.outcome === 'ok' || this.outcome === 'interrupted' || u.completionTokens > 0 ? u : null;
  }

  private streamClosed = false;
  /** The caller has been sent at least one event of a streamed response. */
  private delivered = false;

  private finishStream(reason: ErrorEntry = Errors.upstreamError): void {
    const s = this.stream;
    if (!s) return;
    this.streamClosed = true;
    this.usage = s.usage();
    this.outcome = s.completed ? 'ok' : 'upstream_error';
    if (!s.completed) this.errorCode = reason.code;
  }

  private routeOf(path: string): Route {
    const rest = path.startsWith(`${this.deps.apiPrefix}/`) ? path.slice(this.deps.apiPrefix.length) : '';
    if (rest === '/chat/completions') return 'chat';
    if (rest === '/embeddings') return 'embeddings';
    if (rest === '/models' || rest.startsWith('/models/')) return 'models';
    if (rest === '/whoami') return 'whoami';
    if (rest === '/usage') return 'usage';
    return 'unknown';
  }

  private modelsReply(): Action {
    const rest = this.path.slice(`${this.deps.apiPrefix}/models`.length);
    if (rest === '') return this.ok(this.deps.catalog.modelListJson());
    let id: string;
    try {
      id = decodeURIComponent(rest.slice(1));
    } catch {
      return this.refuse(Errors.notFound);
    }
    const one = this.deps.catalog.modelJson(id);
    return one ? this.ok(one) : this.refuse(Errors.notFound);
  }

  private whoami(): Record<string, unknown> {
    const p = this.principal as Principal;
    return {
      object: 'whoami',
      subject_id: p.subjectId,
      tenant_id: p.tenantId,
      auth_method: p.method,
      scopes: p.scopes,
      key_id: p.keyId,
      role: p.role,
      identity_provider: this.deps.identityProvider(),
      request_id: this.requestId,
    };
  }

  private ok(body: string): Action {
    this.status = 200;
    this.outcome = 'ok';
    return { kind: 'reply', status: 200, body, headers: JSON_HEADERS };
  }

  private refuse(entry: ErrorEntry): Action {
    return this.refuseWith(gatewayError(entry));
  }

  private refuseWith(err: GatewayError): Action {
    this.status = err.entry.status;
    this.outcome = err.entry.status >= 500 ? 'upstream_error' : 'refused';
    this.errorCode = err.entry.code;
    return {
      kind: 'reply',
      status: err.entry.status,
      body: JSON.stringify(envelope(err, this.requestId)),
      headers: { ...JSON_HEADERS, ...(err.entry.headers ?? {}) },
    };
  }

  private upstreamFailed(): Action {
    return this.refuse(Errors.upstreamError);
  }
}
