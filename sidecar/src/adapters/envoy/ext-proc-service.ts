import type { ServerDuplexStream } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { Exchange, type Action, type ExchangeDeps, type ExchangeSummary } from '../../domain/exchange.js';
import { ProcessingMode_BodySendMode, ProcessingMode_HeaderSendMode } from '../../generated/envoy/extensions/filters/http/ext_proc/v3/processing_mode.js';
import type {
  CommonResponse,
  ExternalProcessorServer,
  ProcessingRequest,
  ProcessingResponse,
} from '../../generated/envoy/service/ext_proc/v3/external_processor.js';
import { AUTHZ_NAMESPACE, principalFromMetadata } from './authz-service.js';
import { headerMapToRecord, toHeaderMutation } from './headers.js';

type Phase = 'requestHeaders' | 'requestBody' | 'responseHeaders' | 'responseBody';

const STREAMED_RESPONSE = {
  requestHeaderMode: ProcessingMode_HeaderSendMode.DEFAULT,
  responseHeaderMode: ProcessingMode_HeaderSendMode.DEFAULT,
  requestBodyMode: ProcessingMode_BodySendMode.BUFFERED,
  responseBodyMode: ProcessingMode_BodySendMode.STREAMED,
  requestTrailerMode: ProcessingMode_HeaderSendMode.DEFAULT,
  responseTrailerMode: ProcessingMode_HeaderSendMode.DEFAULT,
};

const PASS_RESPONSE = { ...STREAMED_RESPONSE, responseBodyMode: ProcessingMode_BodySendMode.NONE };

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
  if (action.body) common.bodyMutation = { body: action.body };
  const res: ProcessingResponse = { requestDrain: false, [phase]: { response: common } };
  if (action.streamResponse) res.modeOverride = STREAMED_RESPONSE;
  if (action.passResponse) res.modeOverride = PASS_RESPONSE;
  return res;
}

export interface ExtProcDeps {
  readonly exchange: ExchangeDeps;
  readonly log: Logger;
  /** Called once per exchange when it ends (logging now; billing later). */
  readonly onSummary: (summary: ExchangeSummary) => void;
}

/** The ext_proc adapter: one gRPC stream per HTTP exchange. */
export function createExternalProcessorService(deps: ExtProcDeps): ExternalProcessorServer {
  return {
    process(call: ServerDuplexStream<ProcessingRequest, ProcessingResponse>) {
      const exchange = new Exchange(deps.exchange);
      let finished = false;
      const finish = (abandoned: boolean) => {
        if (finished) return;
        finished = true;
        if (abandoned) exchange.abandon();
        deps.onSummary(exchange.summary());
      };

      call.on('data', (req: ProcessingRequest) => {
        let res: ProcessingResponse;
        try {
          res = handle(exchange, req);
        } catch (err) {
          deps.log.error({ err: (err as Error).name, msg: (err as Error).message }, 'ext_proc handler failed');
          call.destroy(err as Error); // Envoy fails closed (500 → 503 envelope)
          finish(true);
          return;
        }
        call.write(res);
        if (res.immediateResponse || (req.responseBody?.endOfStream ?? false) || res.modeOverride === PASS_RESPONSE) {
          finish(false);
          // Close our side cleanly: Envoy then carries on without ext_proc instead of
          // resetting the stream (a reset per request trips HTTP/2 rapid-reset limits).
          call.end();
        }
      });
      call.on('end', () => {
        finish(true);
        call.end();
      });
      call.on('error', () => finish(true));
      call.on('cancelled', () => finish(true));
    },
  };
}

function handle(exchange: Exchange, req: ProcessingRequest): ProcessingResponse {
  if (req.requestHeaders) {
    const h = headerMapToRecord(req.requestHeaders.headers);
    const md = req.metadataContext?.filterMetadata[AUTHZ_NAMESPACE];
    const action = exchange.requestHeaders({
      method: h.get(':method') ?? '',
      path: h.get(':path') ?? '',
      requestId: h.get('x-request-id') ?? '',
      endOfStream: req.requestHeaders.endOfStream,
      contentLength: h.has('content-length') ? Number(h.get('content-length')) : null,
      principal: principalFromMetadata(md),
    });
    return toResponse('requestHeaders', action);
  }
  if (req.requestBody) {
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
