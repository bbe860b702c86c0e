/**
 * The one error catalogue. Every error the gateway itself produces under the
 * version prefix is an entry here: stable code, HTTP status, type and a fixed
 * message. Messages never echo a caller's value, a key, a prompt or an
 * internal model name.
 */

export interface ErrorEntry {
  readonly status: number;
  readonly type: string;
  readonly code: string | null;
  readonly message: string;
  /** Extra response headers (e.g. Retry-After). */
  readonly headers?: Readonly<Record<string, string>>;
}

const entry = (e: ErrorEntry): ErrorEntry => Object.freeze(e);

export const Errors = Object.freeze({
  invalidRequest: entry({ status: 400, type: 'invalid_request_error', code: 'invalid_request', message: 'The request body is invalid.' }),
  unknownModel: entry({ status: 400, type: 'invalid_request_error', code: 'SRV_001', message: 'Unknown model.' }),
  wrongEndpointForModel: entry({ status: 400, type: 'invalid_request_error', code: 'SRV_001', message: 'This model is not served on this endpoint.' }),
  emptyInput: entry({ status: 400, type: 'invalid_request_error', code: 'SRV_001', message: 'input must be non-empty.' }),
  invalidApiKey: entry({ status: 401, type: 'invalid_request_error', code: 'invalid_api_key', message: 'Invalid or missing API key. Send a valid key in the X-API-Key header.' }),
  /** Account paths: the spec's observed message, for every credential failure there (auth rule 9: one message). */
  missingCredentials: entry({ status: 401, type: 'authentication_error', code: 'AUTH_001', message: 'Missing credentials' }),
  noWorkspace: entry({
    status: 403,
    type: 'permission_error',
    code: 'AUTHZ_001',
    message: "{'error': 'no_workspace'} The session does not belong to the workspace named by X-Workspace-ID (send X-Workspace-ID when the person belongs to several).",
  }),
  insufficientCredit: entry({
    status: 402,
    type: 'insufficient_quota',
    code: 'insufficient_credit',
    message: 'The credit balance does not cover this request.',
  }),
  insufficientScope: entry({ status: 403, type: 'permission_error', code: 'insufficient_scope', message: 'This key lacks the required scope "ai".' }),
  scopeNotRecognised: entry({ status: 403, type: 'permission_error', code: 'scope_not_recognised', message: 'This key carries a scope that is not recognised; no wildcard scope exists.' }),
  keyOutsidePrefix: entry({ status: 403, type: 'permission_error', code: 'AUTHZ_001', message: 'API keys are valid only on the gateway paths.' }),
  notFound: entry({ status: 404, type: 'not_found_error', code: null, message: 'Not found.' }),
  billingNotEnabled: entry({ status: 404, type: 'not_found_error', code: null, message: 'Billing is not enabled on this deployment.' }),
  methodNotAllowed: entry({ status: 405, type: 'invalid_request_error', code: 'method_not_allowed', message: 'Method not allowed on this path.' }),
  payloadTooLarge: entry({ status: 413, type: 'invalid_request_error', code: 'request_too_large', message: 'The request body is too large.' }),
  tooManyHeaders: entry({ status: 431, type: 'invalid_request_error', code: 'request_headers_too_large', message: 'Too many request headers.' }),
  rateLimitExceeded: entry({
    status: 429,
    type: 'rate_limit_error',
    code: 'rate_limit_exceeded',
    message: 'Too many requests or tokens this minute; wait and retry.',
  }),
  spendCapExceeded: entry({
    status: 429,
    type: 'insufficient_quota',
    code: 'spend_cap_exceeded',
    message: "The spend cap for this period is reached; waiting does not help until the period rolls over or the cap is raised.",
  }),
  upstreamError: entry({ status: 502, type: 'api_error', code: 'upstream_error', message: 'The model provider did not deliver a response.' }),
  identityProviderUnavailable: entry({
    status: 503,
    type: 'api_error',
    code: 'identity_provider_unavailable',
    message: 'Platform session tokens are not accepted on this path; use an API key in the X-API-Key header.',
    headers: { 'Retry-After': '30' },
  }),
  creditsUnavailable: entry({
    status: 503,
    type: 'api_error',
    code: 'credits_unavailable',
    message: 'The credit ledger is unreachable; the request was not run.',
  }),
  serviceUnavailable: entry({ status: 503, type: 'api_error', code: 'service_unavailable', message: 'The gateway is temporarily unavailable.' }),
  /** A normal stop: new requests are refused while exchanges in flight finish; a stream cut at the drain deadline ends with it. */
  restarting: entry({
    status: 503,
    type: 'api_error',
    code: 'service_unavailable',
    message: 'The gateway is restarting; retry the request.',
    headers: { 'Retry-After': '1' },
  }),
});

export type ErrorName = keyof typeof Errors;

export interface ErrorEnvelope {
  error: { message: string; type: string; param: string | null; code: string | null; request_id: string };
}

/** A gateway error ready to be sent: the entry plus request-specific detail. */
export interface GatewayError {
  readonly entry: ErrorEntry;
  readonly message: string;
  readonly param: string | null;
}

export function gatewayError(entry: ErrorEntry, detail: { message?: string; param?: string | null } = {}): GatewayError {
  return { entry, message: detail.message ?? entry.message, param: detail.param ?? null };
}

export function envelope(err: GatewayError, requestId: string): ErrorEnvelope {
  return {
    error: { message: err.message, type: err.entry.type, param: err.param, code: err.entry.code, request_id: requestId },
  };
}

export function envelopeBytes(err: GatewayError, requestId: string): Buffer {
  return Buffer.from(JSON.stringify(envelope(err, requestId)));
}
