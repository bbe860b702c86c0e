/**
 * Envoy's own replies (route miss, provider down, sidecar down, body too
 * large, protocol errors) rewritten into the gateway's error envelope.
 *
 * Replies built by the sidecar (ext_authz denials, ext_proc immediate
 * responses) are local replies too; they are left alone because no mapper
 * matches them: the sidecar never uses the statuses or flags matched here
 * (500, 504, 408, 413, 431, NR, DPE, upstream-failure flags).
 * The first matching mapper wins.
 */

interface Envelope {
  status: number;
  type: string;
  code: string | null;
  message: string;
}

import { AccountErrors, type ErrorEntry } from '../src/domain/errors.js';

const accountEnvelope = (e: ErrorEntry): Envelope => ({ status: e.status, type: e.type, code: e.code, message: e.message });

const UPSTREAM_FLAGS = ['UF', 'UH', 'UT', 'URX', 'UC', 'UO', 'UR', 'NC', 'LH', 'UPE', 'UMSDR', 'SI', 'DF', 'OM'];

function body(e: Envelope, requestId: string): Record<string, unknown> {
  return {
    json_format: {
      error: {
        message: e.message,
        type: e.type,
        param: null,
        code: e.code,
        request_id: requestId,
      },
    },
    content_type: 'application/json',
  };
}

function mapper(filter: Record<string, unknown>, e: Envelope): Record<string, unknown> {
  return { filter, status_code: e.status, body_format_override: body(e, '%REQ(X-REQUEST-ID)%') };
}

/**
 * A request Envoy refused before it generated a request id (a path it cannot
 * normalise: %00, a fragment): the envelope still carries a UUID, made for
 * this reply (Envoy has no id to share, so there is no x-request-id header
 * and the access log line has none either).
 */
function earlyMapper(filter: Record<string, unknown>, e: Envelope): Record<string, unknown> {
  return { filter, status_code: e.status, body_format_override: body(e, '%UNIQUE_ID%') };
}
const noRequestId = { header_filter: { header: { name: 'x-request-id', present_match: false } } };

const statusIs = (code: number) => ({
  status_code_filter: { comparison: { op: 'EQ', value: { default_value: code, runtime_key: `local_reply.status_${code}` } } },
});
const flags = (list: string[]) => ({ response_flag_filter: { flags: list } });
const pathPrefix = (prefix: string) => ({
  header_filter: { header: { name: ':path', string_match: { prefix } } },
});
const and = (...filters: Record<string, unknown>[]) => ({ and_filter: { filters } });
const or = (...filters: Record<string, unknown>[]) => ({ or_filter: { filters } });

export function localReplyConfig(apiPrefix: string, healthPath: string): Record<string, unknown> {
  const unavailable: Envelope = { status: 503, type: 'api_error', code: 'service_unavailable', message: 'The gateway is temporarily unavailable.' };
  const upstream: Envelope = { status: 502, type: 'api_error', code: 'upstream_error', message: 'The model provider did not deliver a response.' };
  const accountPaths = or(pathPrefix(`${apiPrefix}/credits`), pathPrefix(`${apiPrefix}/accounts`));
  return {
    mappers: [
      earlyMapper(and(statusIs(400), noRequestId), { status: 400, type: 'invalid_request_error', code: 'invalid_request', message: 'The request path is malformed.' }),
      // The health path with the sidecar down: not ready (a load balancer takes this instance out).
      // Its :path was rewritten to the sidecar's /readyz by now; Envoy keeps the original in x-envoy-original-path.
      {
        filter: and(flags(UPSTREAM_FLAGS), { header_filter: { header: { name: 'x-envoy-original-path', string_match: { exact: healthPath } } } }),
        status_code: 503,
        body_format_override: { json_format: { status: 'unavailable' }, content_type: 'application/json' },
      },
      mapper(flags(['NR']), { status: 404, type: 'not_found_error', code: null, message: 'Not found.' }),
      // ext_authz could not reach the sidecar (status_on_error is 500).
      mapper(and(flags(['UAEX']), statusIs(500)), unavailable),
      mapper(and(flags(UPSTREAM_FLAGS), accountPaths), unavailable),
      mapper(flags(UPSTREAM_FLAGS), upstream),
      mapper(flags(['DPE', 'UPE']), { status: 400, type: 'invalid_request_error', code: 'invalid_request', message: 'The request is malformed.' }),
      // Over-size bodies on the account paths get the account service's shape (status-class code, token in the message).
      mapper(and(statusIs(413), accountPaths), accountEnvelope(AccountErrors.requestTooLarge)),
      mapper(statusIs(413), { status: 413, type: 'invalid_request_error', code: 'request_too_large', message: 'The request body is too large.' }),
      mapper(statusIs(431), { status: 431, type: 'invalid_request_error', code: 'request_headers_too_large', message: 'The request headers are too large.' }),
      mapper(statusIs(408), { status: 408, type: 'invalid_request_error', code: 'request_timeout', message: 'The request was not received in time.' }),
      // ext_proc errors (gRPC failure: 500; message timeout: 504) and fallback routes.
      mapper(or(statusIs(500), statusIs(504)), unavailable),
    ],
  };
}
