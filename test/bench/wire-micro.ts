/**
 * CPU of the sidecar's own protobuf codecs alone (no gRPC, no Envoy): the
 * three ext_proc messages Envoy sends for a JSON chat (the request body with
 * its attributes and forwarded metadata, the response headers, a piece of
 * response body) decoded as the adapter reads them, and the answers encoded:
 * the ext_authz answer of an admitted chat (provider headers, content-length,
 * headers to remove, the principal and hold as dynamic metadata) and the
 * ext_proc answers of an exchange (the request body, the response headers, a
 * streamed piece, the last piece with the access log's metadata). The answers
 * come in the shapes the gateway gives them (with and without a lease, stream
 * or JSON flow, with or without usage): in service the encoders see many
 * object shapes, and a benchmark of one shape would show them faster than they
 * are. Deterministic enough to compare one change.
 *
 *   npx tsx test/bench/wire-micro.ts      WIRE_MICRO_ITER (default 200) passes over 1,000 messages of each kind, 6 rounds
 */
import { constantHeader, encodeCheckResponse } from '../../sidecar/src/adapters/envoy/check-response-encode.js';
import { headerMapToRecord, plainHeader } from '../../sidecar/src/adapters/envoy/headers.js';
import { decodeProcessingRequest } from '../../sidecar/src/adapters/envoy/processing-request-decode.js';
import { encodeProcessingResponse } from '../../sidecar/src/adapters/envoy/processing-response-encode.js';
import type { CheckResponse } from '../../sidecar/src/generated/envoy/service/auth/v3/external_auth.js';
import { ProcessingRequest, type ProcessingResponse } from '../../sidecar/src/generated/envoy/service/ext_proc/v3/external_processor.js';
import { envInteger, fmt } from './report.js';

const ITER = envInteger('WIRE_MICRO_ITER', 200);
const ROUNDS = 6;

const providerHeaders = (flow: string) => [
  constantHeader('authorization', 'Bearer sk-provider-0123456789'),
  constantHeader('content-type', 'application/json'),
  constantHeader('accept-encoding', 'identity'),
  constantHeader('x-svc-flow', flow),
];
const flows = { stream: providerHeaders('stream'), buffer: providerHeaders('buffer') };
const principal = {
  tenant_id: 'ten_0123456789abcdef',
  subject_id: 'key_0123456789abcdef01234567',
  auth_method: 'api_key',
  scopes: 'inference',
  key_id: 'key_0123456789abcdef01234567',
  role: '',
};

/** The i-th admitted chat's ext_authz answer: stream or JSON, leased or not, committed in a lease or moved out of it. */
function check(i: number): CheckResponse {
  const hold = { held: String(1000 + i), ...(i % 2 ? { leased: '1' } : {}), ...(i % 3 ? { lease: `lease-0a1b2c3d-1111-2222-3333-${String(i % 100).padStart(12, '0')}` } : {}) };
  return {
    status: { code: 0, message: '', details: [] },
    okResponse: {
      headers: [...flows[i % 2 ? 'stream' : 'buffer'], plainHeader('content-length', String(180 + (i % 50)))],
      headersToRemove: ['x-api-key', 'user-agent'].slice(0, 1 + (i % 2)),
      responseHeadersToAdd: [],
      queryParametersToSet: [],
      queryParametersToRemove: [],
    },
    dynamicMetadata: { ...principal, ...hold },
  };
}

const answer = Buffer.from(
  '{"id":"0b8f2c1e-4c7d-4a52-9d0e-6f1b2a3c4d5e","object":"chat.completion","created":1,"model":"svc-core","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there."},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21},"svc":{"request_id":"0b8f2c1e-4c7d-4a52-9d0e-6f1b2a3c4d5e"}}',
);
const piece = Buffer.from('data: {"id":"0b8f2c1e-4c7d-4a52-9d0e-6f1b2a3c4d5e","object":"chat.completion.chunk","created":1,"model":"svc-core","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}\n\n');

/** The access log's fields, as the ext_proc adapter builds them (an error has a code and no usage). */
function accessLog(i: number): Record<string, string | number> {
  const out: Record<string, string | number> = { outcome: i % 5 ? 'ok' : 'upstream_error', alias: 'svc-core' };
  if (i % 5 === 0) out.code = 'upstream_error';
  else {
    out.prompt_tokens = 9;
    out.completion_tokens = 12;
    out.usage_estimated = 'false';
  }
  return out;
}

/** The i-th ext_proc answer: the four kinds an exchange sends, in turn. */
function processing(i: number): ProcessingResponse {
  const common = { status: 0, clearRouteCache: false };
  switch (i % 4) {
    case 0:
      return { requestDrain: false, requestBody: { response: { ...common, bodyMutation: { body: answer } } } };
    case 1:
      return { requestDrain: false, responseHeaders: { response: { ...common, headerMutation: { setHeaders: [plainHeader('content-length', '260')], removeHeaders: ['server'] } } } };
    case 2:
      return { requestDrain: false, responseBody: { response: { ...common, bodyMutation: { streamedResponse: { body: piece, endOfStream: false, endOfStreamWithoutMessage: false, grpcMessageCompressed: false } } } } };
    default:
      return {
        requestDrain: false,
        responseBody: { response: { ...common, bodyMutation: { streamedResponse: { body: answer, endOfStream: true, endOfStreamWithoutMessage: false, grpcMessageCompressed: false } } } },
        dynamicMetadata: { gateway: accessLog(i) },
      };
  }
}

const checks = Array.from({ length: 1000 }, (_, i) => check(i));
const answers = Array.from({ length: 1000 }, (_, i) => processing(i));

/** ns per call, best of the rounds after the first (V8 has optimized by then). */
function time(encode: () => void, calls: number): number {
  let best = Infinity;
  for (let r = 0; r < ROUNDS; r++) {
    const t0 = process.hrtime.bigint();
    for (let k = 0; k < ITER; k++) encode();
    const ns = Number(process.hrtime.bigint() - t0) / (ITER * calls);
    if (r > 0) best = Math.min(best, ns);
  }
  return best;
}

// Envoy's messages, as Envoy 1.40 writes them: the ext_authz decision forwarded with each, the attributes with the first.
const forwarded = { filterMetadata: { 'envoy.filters.http.ext_authz': { ...principal, held: '1234', leased: '1' } }, typedFilterMetadata: {} };
const raw = (key: string, value: string) => ({ key, value: '', rawValue: Buffer.from(value) });
const envoyMessage = (m: Partial<ProcessingRequest>) => Buffer.from(ProcessingRequest.encode({ attributes: {}, observabilityMode: false, metadataContext: forwarded as never, ...m } as ProcessingRequest).finish());
const chatBody = Buffer.from('{"model":"svc-core","messages":[{"role":"user","content":"Say hello in one short sentence."}]}');
const requestBody = envoyMessage({
  requestBody: { body: chatBody, endOfStream: true, endOfStreamWithoutMessage: false, grpcMessageCompressed: false },
  attributes: { 'envoy.filters.http.ext_proc': { 'request.id': '0b8f2c1e-4c7d-4a52-9d0e-6f1b2a3c4d5e', 'request.path': '/v1/chat/completions', 'request.method': 'POST' } },
});
const responseHeaders = envoyMessage({
  responseHeaders: {
    headers: { headers: [raw(':status', '200'), raw('content-type', 'application/json'), raw('content-length', '260'), raw('date', 'Sun, 29 Nov 2026 00:00:00 GMT'), raw('server', 'uvicorn'), raw('x-request-id', '0b8f2c1e-4c7d-4a52-9d0e-6f1b2a3c4d5e'), raw('x-envoy-upstream-service-time', '1')] },
    attributes: {},
    endOfStream: false,
  },
});
const responseBody = envoyMessage({ responseBody: { body: answer, endOfStream: false, endOfStreamWithoutMessage: false, grpcMessageCompressed: false } });
const decodeNs = (bytes: Buffer, read: (m: ProcessingRequest) => unknown) =>
  time(() => {
    for (let i = 0; i < 1000; i++) read(decodeProcessingRequest(bytes));
  }, 1000);
const decodeRequestBody = decodeNs(requestBody, (m) => m.attributes);
const decodeHeaders = decodeNs(responseHeaders, (m) => headerMapToRecord(m.responseHeaders?.headers));
const decodeBody = decodeNs(responseBody, (m) => m.responseBody?.body);

const checkNs = time(() => {
  for (const m of checks) encodeCheckResponse(m);
}, checks.length);
const processingNs = time(() => {
  for (const m of answers) encodeProcessingResponse(m);
}, answers.length);
const us = (ns: number) => `${fmt(ns / 1000, 3)} µs`;
console.log(`decode, ext_proc request body (with its attributes): ${us(decodeRequestBody)}; response headers (and their map): ${us(decodeHeaders)}; a piece of response body: ${us(decodeBody)}`);
console.log(`encode, ext_authz answer of an admitted chat: ${us(checkNs)}; ext_proc answer (the four kinds in turn): ${us(processingNs)}`);
console.log(`(best of ${ROUNDS - 1} rounds of ${ITER} x 1,000)`);
