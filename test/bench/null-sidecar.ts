/**
 * The "floor" sidecar of the benchmark: the gateway's two gRPC services with
 * handlers that do nothing a gateway needs. Envoy runs the gateway's own
 * bootstrap against it (same filters, same per-route ext_proc modes, same
 * messages on the wire), so the floor row measures what the architecture
 * itself costs on this machine (Envoy's ext_authz and ext_proc clients,
 * gRPC over HTTP/2 with @grpc/grpc-js, process wake-ups), and the gateway
 * row minus the floor row is what the gateway's own code adds.
 *
 *   ext_authz: allows every request; sets the provider key and the flow
 *              header (a substring test for "stream":true, no JSON parse).
 *   ext_proc:  answers every message with "continue" and no mutation; a
 *              response body (FULL_DUPLEX_STREAMED on every body route, JSON
 *              and SSE) is echoed back piece by piece.
 *
 * Requests must already speak the provider's language (internal model name):
 * nothing is rewritten. Usage: tsx test/bench/null-sidecar.ts <address>
 * <provider key> <flow header name>; prints "READY" when it serves.
 */
import { startGrpcServer } from '../../sidecar/src/adapters/grpc-server.js';
import type { BidiCall, UnaryCall, UnaryRespond } from '../../sidecar/src/adapters/grpc-direct.js';
import type { CheckResponse } from '../../sidecar/src/generated/envoy/service/auth/v3/external_auth.js';
import type { AuthorizationHandler } from '../../sidecar/src/adapters/envoy/authz-service.js';
import type { CheckInput } from '../../sidecar/src/adapters/envoy/check-request-decode.js';
import type { ProcessingRequest, ProcessingResponse } from '../../sidecar/src/generated/envoy/service/ext_proc/v3/external_processor.js';
import type { ExternalProcessorHandler } from '../../sidecar/src/adapters/envoy/ext-proc-service.js';
import { plainHeader, rawHeader } from '../../sidecar/src/adapters/envoy/headers.js';

const STREAM_FLAG = /"stream"\s*:\s*true/;

/**
 * FLOOR_SHAPES=1: every answer has the shape of the gateway's (the same header edits, the
 * body replaced by the same bytes, dynamic metadata to ext_proc and to the access log),
 * still computed by no gateway code. Compared with the plain floor, it shows what Envoy
 * itself spends applying the gateway's answers (docs/benchmark.md).
 */
const SHAPES = process.env.FLOOR_SHAPES === '1';
/** Request headers the gateway lets through to the provider, or sets itself (authz-service.ts). */
const KEPT = new Set(['host', 'accept', 'x-request-id', 'x-forwarded-proto', 'authorization', 'content-type', 'accept-encoding', 'content-length']);
const PRINCIPAL = { tenant_id: 'tenant-bench', subject_id: 'key-bench', auth_method: 'api_key', scopes: 'ai', key_id: 'key-bench', role: '', held: '123456', leased: '1' };
/**
 * The least an admitted request carries: Envoy runs ext_proc only for a request whose ext_authz
 * left a tenant in its metadata (the others are refusals and Envoy's own replies), so the
 * plain floor sends this one field to keep the gateway's message pattern.
 */
const ADMITTED = { tenant_id: 'tenant-bench' };
/** What the gateway's last answer leaves for the access log (ext-proc-service.ts accessLogFields). */
const ACCESS_LOG = { gateway: { outcome: 'ok', alias: 'svc-core', prompt_tokens: 12, completion_tokens: 34, usage_estimated: 'false' } };
/** Provider response headers the gateway keeps (exchange.ts); the rest are removed. */
const RESPONSE_KEPT = new Set([':status', 'content-type', 'content-length', 'date', 'cache-control', 'transfer-encoding', 'vary', 'connection']);

function nullAuthz(upstreamKey: string, flowHeader: string): AuthorizationHandler {
  const auth = plainHeader('authorization', `Bearer ${upstreamKey}`);
  return {
    check(call: UnaryCall<CheckInput>, cb: UnaryRespond<CheckResponse>) {
      const body = call.request.body ?? Buffer.alloc(0);
      const stream = STREAM_FLAG.test(body.toString('latin1'));
      const names = SHAPES ? call.request.headers.names : [];
      cb(null, {
        status: { code: 0, message: '', details: [] },
        okResponse: {
          headers: SHAPES
            ? [auth, plainHeader('content-type', 'application/json'), plainHeader('accept-encoding', 'identity'), plainHeader(flowHeader, stream ? 'stream' : 'buffer'), plainHeader('content-length', String(body.length))]
            : [auth, plainHeader(flowHeader, stream ? 'stream' : 'buffer')],
          headersToRemove: SHAPES ? [...new Set(names)].filter((n) => !n.startsWith(':') && !KEPT.has(n) && n !== flowHeader) : [],
          responseHeadersToAdd: [],
          queryParametersToSet: [],
          queryParametersToRemove: [],
        },
        dynamicMetadata: SHAPES ? PRINCIPAL : ADMITTED,
      } as CheckResponse);
    },
  };
}

function nullExtProc(): ExternalProcessorHandler {
  return {
    process(call: BidiCall<ProcessingResponse>) {
      // FLOOR_SHAPES: a JSON answer's headers wait for its body, as the gateway's do (content-length).
      let heldHeaders: ProcessingResponse | null = null;
      const collected: Buffer[] = [];
      const message = (req: ProcessingRequest) => {
        const common = { status: 0, clearRouteCache: false };
        if (req.requestBody) {
          const bodyMutation = SHAPES ? { body: Buffer.from(req.requestBody.body) } : undefined;
          call.write({ requestDrain: false, requestBody: { response: { ...common, bodyMutation } } });
        } else if (req.responseHeaders) {
          const names = (req.responseHeaders.headers?.headers ?? []).map((h) => h.key);
          const json = names.includes('content-length');
          const remove = SHAPES ? names.filter((n) => !RESPONSE_KEPT.has(n)) : [];
          const headerMutation = SHAPES ? { setHeaders: [], removeHeaders: json ? remove : [...remove, 'content-length'] } : undefined;
          const res: ProcessingResponse = { requestDrain: false, responseHeaders: { response: { ...common, headerMutation } } };
          if (SHAPES && json) heldHeaders = res;
          else call.write(res);
        } else if (req.responseBody) {
          const { endOfStream } = req.responseBody;
          let body = req.responseBody.body;
          if (heldHeaders) {
            // Collected to its end, then sent whole behind its headers (as the gateway does).
            collected.push(Buffer.from(body));
            if (!endOfStream) return;
            body = Buffer.concat(collected);
            heldHeaders.responseHeaders!.response!.headerMutation!.setHeaders.push(rawHeader('content-length', String(body.length)));
            call.write(heldHeaders);
            heldHeaders = null;
          }
          const response = { ...common, bodyMutation: { streamedResponse: { body, endOfStream, endOfStreamWithoutMessage: false, grpcMessageCompressed: false } } };
          call.write({ requestDrain: false, responseBody: { response }, ...(SHAPES && endOfStream ? { dynamicMetadata: ACCESS_LOG } : {}) });
          if (endOfStream) call.end();
        } else if (req.responseTrailers) {
          call.write({ requestDrain: false, responseTrailers: {} });
          call.end();
        } else if (req.requestHeaders) {
          call.write({ requestDrain: false, requestHeaders: { response: common } });
        } else {
          call.write({ requestDrain: false, requestTrailers: {} });
        }
      };
      return { message, halfClosed: () => call.end(), cancelled: () => undefined };
    },
  };
}

const [address, upstreamKey, flowHeader] = process.argv.slice(2);
if (!address || upstreamKey === undefined || !flowHeader) {
  process.stderr.write('usage: null-sidecar.ts <address> <provider key> <flow header name>\n');
  process.exit(2);
}
const server = await startGrpcServer(address, { authz: nullAuthz(upstreamKey, flowHeader), extProc: nullExtProc() });
process.stdout.write('READY\n');
const stop = () => void server.close().then(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
