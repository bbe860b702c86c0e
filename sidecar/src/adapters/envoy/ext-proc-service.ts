import { status } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { Exchange, type Action, type ExchangeDeps, type ExchangeHold, type ExchangeSummary } from '../../domain/exchange.js';
import { Errors, type GatewayError } from '../../domain/errors.js';
import type { CommonResponse, ProcessingRequest, ProcessingResponse } from '../../generated/envoy/service/ext_proc/v3/external_processor.js';
import type { BidiCall, BidiReceiver } from '../grpc-direct.js';
import { AUTHZ_NAMESPACE, holdFromMetadata, principalFromMetadata } from './authz-service.js';
import { headerMapToRecord, toHeaderMutation } from './headers.js';
import { forwardedMetadata } from './processing-request-decode.js';
import { Slots } from '../../util/slots.js';

/** Key of the attributes Envoy sends to ext_proc (request.id, request.path, request.method). */
const EXT_PROC_NAMESPACE = 'envoy.filters.http.ext_proc';

type Phase = 'requestHeaders' | 'requestBody' | 'responseHeaders' | 'responseBody';

function toResponse(phase: Phase, action: Action): ProcessingResponse {
  if (action.kind === 'reply') {
    return {
      immediateResponse: {
        status: { code: action.status },
        headers: toHeaderMutation({ set: action.headers, remove: [] }),
        body: Buffer.from(action.body),
        details: 'gateway_reply',
      },
      requestDrain: false,
    };
  }
  const common: CommonResponse = { status: 0, headerMutation: toHeaderMutation(action.headers), clearRouteCache: false };
  if (action.streamed) {
    // FULL_DUPLEX_STREAMED: pieces of any size, sent whenever ready; the last one ends the body.
    common.bodyMutation = {
      streamedResponse: {
        body: action.body ?? Buffer.alloc(0),
        endOfStream: action.streamed.endOfStream,
        endOfStreamWithoutMessage: false,
        grpcMessageCompressed: false,
      },
    };
  } else if (action.body) common.bodyMutation = { body: action.body };
  const res: ProcessingResponse = { requestDrain: false, [phase]: { response: common } };
  return res;
}

/**
 * The headers answer kept back, with the header edits the body's answer
 * brought (a JSON answer's content-length): in full duplex only a headers
 * answer can change headers, so they move there.
 */
function withBodyHeaders(held: ProcessingResponse, body: ProcessingResponse): ProcessingResponse {
  const common = body.responseBody?.response;
  const edit = common?.headerMutation;
  const target = held.responseHeaders?.response;
  if (!edit || !common || !target) return held;
  common.headerMutation = undefined;
  const into = target.headerMutation;
  target.headerMutation = into
    ? { setHeaders: [...into.setHeaders, ...edit.setHeaders], removeHeaders: [...into.removeHeaders, ...edit.removeHeaders] }
    : edit;
  return held;
}

/** The piece of body a response-body answer carries (full duplex), if that is all it carries. */
function streamedPiece(res: ProcessingResponse) {
  const common = res.responseBody?.response;
  return common && !common.headerMutation ? common.bodyMutation?.streamedResponse : undefined;
}

/** A streamed body answer with no bytes that does not end the stream. */
function isEmptyPiece(res: ProcessingResponse): boolean {
  const piece = streamedPiece(res);
  return piece !== undefined && piece.body.length === 0 && !piece.endOfStream;
}

export interface ExtProcDeps {
  /** What exchanges need, or where to read it per exchange (it changes on a configuration reload). */
  readonly exchange: ExchangeDeps | (() => ExchangeDeps);
  readonly log: Logger;
  /**
   * The request's hold is now this exchange's to settle or release. A hold moved out of a
   * credit lease (`leased`) comes with its confirmation: the request goes on to the
   * provider only once it resolves null; otherwise it is refused with the error it
   * resolves to. null: nothing to wait for.
   */
  readonly claim: (hold: ExchangeHold) => Promise<GatewayError | null> | null;
  /** A streamed response silent this long ends with an error event (below Envoy's idle timeout). */
  readonly streamStallMs: number;
  /** Called once per exchange when it ends (the log line and the settlement). */
  readonly onSummary: (summary: ExchangeSummary) => void;
  /** Where the exchanges under way are listed (a stop waits for them, then ends those left). */
  readonly live?: LiveExchanges;
  /** A handler step threw (the exchange fails with a gRPC INTERNAL status). */
  readonly onFailure?: () => void;
}

/** What a stop ends: an exchange still under way (its `endNow`). */
export interface Endable {
  endNow(): void;
}

/** The exchanges this process is serving now, each in a slot it keeps (util/slots.ts says why not a Set). */
export class LiveExchanges extends Slots<Endable> {
  /**
   * A stop's drain deadline: a stream ends with the error event (charged for what
   * it delivered), anything else is given back to Envoy as failed (its hold released).
   */
  endAll(): void {
    this.forEach((exchange) => exchange.endNow());
  }
}

/** ext_proc's Process, served below grpc-js's per-call stream (grpc-direct.ts). */
export interface ExternalProcessorHandler {
  process(call: BidiCall<ProcessingResponse>): BidiReceiver<ProcessingRequest>;
}

/** The ext_proc adapter: one gRPC stream per HTTP exchange. */
export function createExternalProcessorService(deps: ExtProcDeps): ExternalProcessorHandler {
  return {
    process(call) {
      return new ExchangeStream(deps, call);
    },
  };
}

/** The stall clock's callback (a module function with its stream as argument: no closure per exchange). */
function stalled(s: ExchangeStream): void {
  s.onStall();
}

/** The end of the turn in which a piece of streamed body was answered and kept back (see ExchangeStream.pending). */
function endOfTurn(s: ExchangeStream): void {
  s.writePending();
}

/**
 * One ext_proc gRPC stream: its exchange, and the answers it owes Envoy. Its
 * steps are methods, not closures made per exchange (each closure is an
 * allocation, and tsx's keepNames gives each named one a defineProperty call).
 */
class ExchangeStream implements Endable, BidiReceiver<ProcessingRequest> {
  private readonly exchange: Exchange;
  private finished = false;
  private readonly slot: number | undefined;
  private stall: NodeJS.Timeout | null = null;
  // The answer to a streamed response's headers, kept back until the provider's
  // first event (Exchange.awaitingFirstEvent); dropped if a 502 replaces it.
  private heldHeaders: ProcessingResponse | null = null;
  // A piece of streamed body answered but not yet written. Envoy's messages of one stream
  // mostly arrive several in one turn of the event loop (two in three in the bench): the
  // pieces answered later in that turn join this one, and it is written at the end of the
  // turn, or with the answer that ends the body. One message then carries what several did.
  // The first event and the caller's last ([DONE]) are never kept back.
  private pending: ProcessingResponse | null = null;

  constructor(
    private readonly deps: ExtProcDeps,
    private readonly call: BidiCall<ProcessingResponse>,
  ) {
    this.exchange = new Exchange(typeof deps.exchange === 'function' ? deps.exchange() : deps.exchange);
    this.slot = deps.live?.add(this);
  }

  /** Envoy sends no more: the exchange is over. */
  halfClosed(): void {
    this.clearStall();
    this.finish(true);
    // Our side is usually closed already, by the exchange's last answer.
    if (!this.call.ended) this.call.end();
  }

  cancelled(): void {
    this.gone();
  }

  private finish(abandoned: boolean, summary?: ExchangeSummary): void {
    if (this.finished) return;
    this.finished = true;
    const exchange = this.exchange;
    if (abandoned) exchange.abandon();
    const s = summary ?? exchange.summary();
    // The settlement starts here, before the answer just written leaves this tick: it is
    // recorded now (a crash can then never leave a delivered answer unbilled) and written
    // to the store once the answer has left (Billing.finish). `finished` keeps it to once.
    if (this.slot !== undefined) this.deps.live?.delete(this.slot, this);
    try {
      this.deps.onSummary(s);
    } catch (err) {
      this.deps.log.error({ request_id: s.requestId, err: (err as Error).name }, 'exchange summary failed');
      this.deps.onFailure?.();
    }
  }

  endNow(): void {
    if (this.finished) return;
    this.clearStall();
    if (this.exchange.streaming) {
      try {
        this.send(null, toResponse('responseBody', this.exchange.endStreamNow(Errors.restarting)));
      } catch (err) {
        this.fail(err);
      }
    }
    if (this.finished) return;
    // Nothing can be sent unasked outside a stream: Envoy answers the caller (fails closed).
    this.finish(true);
    this.call.fail({ code: status.UNAVAILABLE, details: 'the gateway is stopping' });
  }

  /** A handler step threw: this exchange fails (Envoy fails closed), no other. */
  private fail(err: unknown): void {
    this.clearStall();
    this.deps.log.error({ err: (err as Error).name, msg: (err as Error).message }, 'ext_proc handler failed');
    this.deps.onFailure?.();
    this.finish(true);
    // A status, not a bare destroy (which leaves Envoy waiting for one): Envoy fails closed.
    this.call.fail({ code: status.INTERNAL, details: 'ext_proc handler failed' });
  }

  private clearStall(): void {
    if (this.stall) clearTimeout(this.stall);
  }

  private gone(): void {
    this.clearStall();
    this.finish(true);
  }

  /** Restarts the stall clock on each message of a streamed response (one timer, re-armed in place). */
  private watch(): void {
    if (!this.exchange.streaming) {
      this.clearStall();
      this.stall = null;
    } else if (this.stall) this.stall.refresh();
    else this.stall = setTimeout(stalled, this.deps.streamStallMs, this);
  }

  onStall(): void {
    this.stall = null;
    const exchange = this.exchange;
    if (this.finished || !exchange.streaming) return;
    this.deps.log.warn({ request_id: exchange.summary().requestId }, 'provider stalled; ending the exchange with upstream_error (a 502 before the first event, else an error event)');
    try {
      this.send(null, toResponse('responseBody', exchange.streamStalled()));
    } catch (err) {
      this.fail(err);
    }
  }

  writePending(): void {
    if (this.pending && !this.finished) this.call.write(this.pending);
    this.pending = null;
  }

  /** An answer that arrives later (a promise): sent unless the step fails. */
  private sendLater(req: ProcessingRequest, res: ProcessingResponse): void {
    try {
      this.send(req, res);
    } catch (err) {
      this.fail(err);
    }
  }

  private send(req: ProcessingRequest | null, res: ProcessingResponse): void {
    if (this.finished) return;
    const exchange = this.exchange;
    const call = this.call;
    if (exchange.holdsResponseHeaders && !res.immediateResponse && req?.responseHeaders) {
      this.heldHeaders = res;
      return;
    }
    // Full duplex needs no answer per message: a provider read that completed no event
    // (a slice of one) gets none, before the first event and after it.
    if (req?.responseBody && isEmptyPiece(res)) return;
    // The first event is written at once, with the headers it releases.
    const heldHeaders = this.heldHeaders;
    const first = heldHeaders !== null;
    if (heldHeaders) {
      if (!res.immediateResponse) call.write(withBodyHeaders(heldHeaders, res));
      this.heldHeaders = null;
    }
    // Every response body is processed in full duplex: its last piece carries endOfStream.
    const piece = streamedPiece(res);
    const streamedEnd = res.responseBody?.response?.bodyMutation?.streamedResponse?.endOfStream ?? false;
    const ending = res.immediateResponse !== undefined || streamedEnd;
    if (piece && !ending && !first && !exchange.callerStreamEnded) {
      const into = this.pending && streamedPiece(this.pending);
      if (into) into.body = Buffer.concat([into.body, piece.body]);
      else {
        this.pending = res;
        setImmediate(endOfTurn, this);
      }
      return;
    }
    const held = this.pending && streamedPiece(this.pending);
    if (held && piece) {
      piece.body = Buffer.concat([held.body, piece.body]);
      this.pending = null;
    } else this.writePending();
    // The exchange's last answer carries what Envoy's access log reads (alias, tokens, outcome).
    const summary = ending && exchange.started ? exchange.summary() : undefined;
    if (summary) res.dynamicMetadata = { [ACCESS_LOG_NAMESPACE]: accessLogFields(summary) };
    call.write(res);
    if (ending) {
      this.clearStall();
      this.finish(false, summary);
      // Close our side cleanly: Envoy then carries on without ext_proc instead of
      // resetting the stream (a reset per request trips HTTP/2 rapid-reset limits).
      call.end();
    }
  }

  /** One of Envoy's messages: its answer, now or (a lone request-headers message, a leased body) later. */
  message(req: ProcessingRequest): void {
    try {
      const exchange = this.exchange;
      const wasStarted = exchange.started;
      const res = handle(exchange, req);
      const hold = !wasStarted && exchange.started ? exchange.hold : null;
      const confirmed = hold ? this.deps.claim(hold) : null;
      // Only a lone request-headers message (GET /usage) is answered asynchronously,
      // and a body admitted from a credit lease once the store has confirmed its hold.
      if (res instanceof Promise) {
        res.then(
          (r) => this.sendLater(req, r),
          (err: unknown) => this.fail(err),
        );
      } else if (confirmed && !res.immediateResponse) {
        confirmed.then(
          (refusal) => this.sendLater(req, refusal ? toResponse('requestBody', exchange.holdUnconfirmed(refusal)) : res),
          (err: unknown) => this.fail(err),
        );
      } else this.send(req, res);
      if (req.responseHeaders || req.responseBody) this.watch();
    } catch (err) {
      this.fail(err);
    }
  }
}

/**
 * Dynamic metadata namespace the sidecar writes at the end of an exchange
 * (Envoy: ext_proc metadata_options.receiving_namespaces); the access log reads it.
 */
export const ACCESS_LOG_NAMESPACE = 'gateway';

/** Only ids, the alias, counts and the outcome: never a key, a prompt or an internal model name. */
function accessLogFields(s: ExchangeSummary): Record<string, string | number> {
  const out: Record<string, string | number> = { outcome: s.outcome };
  if (s.alias) out.alias = s.alias;
  if (s.errorCode) out.code = s.errorCode;
  if (s.usage) {
    out.prompt_tokens = s.usage.promptTokens;
    out.completion_tokens = s.usage.completionTokens;
    out.usage_estimated = s.usage.estimated ? 'true' : 'false';
  }
  return out;
}

/** What ext_authz left for this request in dynamic metadata: the principal and the hold. */
function gateDecision(req: ProcessingRequest) {
  const md = forwardedMetadata(req)?.filterMetadata[AUTHZ_NAMESPACE];
  return { principal: principalFromMetadata(md), ...holdFromMetadata(md) };
}

/** Request attributes Envoy sends with the first message when request headers are not sent. */
function attribute(req: ProcessingRequest, name: string): string {
  const v = req.attributes[EXT_PROC_NAMESPACE]?.[name];
  return typeof v === 'string' ? v : '';
}

function handle(exchange: Exchange, req: ProcessingRequest): ProcessingResponse | Promise<ProcessingResponse> {
  if (req.requestHeaders) {
    const h = headerMapToRecord(req.requestHeaders.headers);
    const action = exchange.requestHeaders({
      method: h.get(':method') ?? '',
      path: h.get(':path') ?? '',
      requestId: h.get('x-request-id') ?? '',
      ...gateDecision(req),
    });
    return action instanceof Promise ? action.then((a) => toResponse('requestHeaders', a)) : toResponse('requestHeaders', action);
  }
  if (req.requestBody) {
    if (!exchange.started) {
      const requestId = attribute(req, 'request.id');
      exchange.start({
        method: attribute(req, 'request.method'),
        path: attribute(req, 'request.path'),
        requestId,
        // Read from what Envoy forwards (decoded only then) when ext_authz ran elsewhere.
        ...(exchange.decidedHere(requestId) ?? gateDecision(req)),
      });
    }
    return toResponse('requestBody', exchange.requestBody(req.requestBody.body));
  }
  if (req.responseHeaders) {
    const h = headerMapToRecord(req.responseHeaders.headers);
    const status = Number(h.get(':status') ?? 0);
    return toResponse('responseHeaders', exchange.responseHeaders(status, [...h.keys()], h.get('content-type'), req.responseHeaders.endOfStream));
  }
  if (req.responseBody) {
    return toResponse('responseBody', exchange.responseBody(req.responseBody.body, req.responseBody.endOfStream));
  }
  // Trailers are not requested; answer anything else with an empty continue.
  if (req.requestTrailers) return { requestDrain: false, requestTrailers: {} };
  return { requestDrain: false, responseTrailers: {} };
}
