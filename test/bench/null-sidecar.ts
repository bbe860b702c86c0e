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
import type { ServerDuplexStream, ServerUnaryCall, sendUnaryData } from '@grpc/grpc-js';
import { startGrpcServer } from '../../sidecar/src/adapters/grpc-server.js';
import type { AuthorizationServer, CheckRequest, CheckResponse } from '../../sidecar/src/generated/envoy/service/auth/v3/external_auth.js';
import type { ExternalProcessorServer, ProcessingRequest, ProcessingResponse } from '../../sidecar/src/generated/envoy/service/ext_proc/v3/external_processor.js';
import { plainHeader } from '../../sidecar/src/adapters/envoy/headers.js';

const STREAM_FLAG = /"stream"\s*:\s*true/;

function nullAuthz(upstreamKey: string, flowHeader: string): AuthorizationServer {
  const auth = plainHeader('authorization', `Bearer ${upstreamKey}`);
  return {
    check(call: ServerUnaryCall<CheckRequest, CheckResponse>, cb: sendUnaryData<CheckResponse>) {
      const body = call.request.attributes?.request?.http?.rawBody ?? Buffer.alloc(0);
      const stream = STREAM_FLAG.test(Buffer.from(body).toString('latin1'));
      cb(null, {
        status: { code: 0, message: '', details: [] },
        okResponse: {
          headers: [auth, plainHeader(flowHeader, stream ? 'stream' : 'buffer')],
          headersToRemove: [],
          responseHeadersToAdd: [],
          queryParametersToSet: [],
          queryParametersToRemove: [],
        },
      } as CheckResponse);
    },
  };
}

function nullExtProc(): ExternalProcessorServer {
  return {
    process(call: ServerDuplexStream<ProcessingRequest, ProcessingResponse>) {
      call.on('data', (req: ProcessingRequest) => {
        const common = { status: 0, clearRouteCache: false };
        if (req.requestBody) {
          call.write({ requestDrain: false, requestBody: { response: common } });
        } else if (req.responseHeaders) {
          call.write({ requestDrain: false, responseHeaders: { response: common } });
        } else if (req.responseBody) {
          const { body, endOfStream } = req.responseBody;
          const response = { ...common, bodyMutation: { streamedResponse: { body, endOfStream, endOfStreamWithoutMessage: false, grpcMessageCompressed: false } } };
          call.write({ requestDrain: false, responseBody: { response } });
          if (endOfStream) call.end();
        } else if (req.responseTrailers) {
          call.write({ requestDrain: false, responseTrailers: {} });
          call.end();
        } else if (req.requestHeaders) {
          call.write({ requestDrain: false, requestHeaders: { response: common } });
        } else {
          call.write({ requestDrain: false, requestTrailers: {} });
        }
      });
      call.on('end', () => call.end());
      call.on('error', () => {});
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
