import { status } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { Gate } from '../../domain/gate.js';
import type { Principal } from '../../domain/auth/principal.js';
import { envelope, Errors, gatewayError, type GatewayError } from '../../domain/errors.js';
import type { Lifecycle } from '../../domain/lifecycle.js';
import type { CheckResponse } from '../../generated/envoy/service/auth/v3/external_auth.js';
import type { CheckInput } from './check-request-decode.js';
import { plainHeader } from './headers.js';
import { constantHeader } from './check-response-encode.js';
import { pathOnly } from '../../domain/auth/routes.js';
import type { UnaryCall, UnaryRespond } from '../grpc-direct.js';

/** Namespace Envoy stores ext_authz dynamic metadata under (forwarded to ext_proc). */
export const AUTHZ_NAMESPACE = 'envoy.filters.http.ext_authz';

/** gRPC metadata Envoy sends with the header-only key check (the first of two ext_authz calls, for a large or unsized body). */
export const AUTHZ_PHASE_HEADER = 'x-authz-phase';

const GRPC_OK = 0;
const GRPC_PERMISSION_DENIED = 7;

/** The principal as flat string fields, in one order: dynamic metadata and identity headers both come from it. */
const PRINCIPAL_FIELDS = ['tenant_id', 'subject_id', 'auth_method', 'scopes', 'key_id', 'role'] as const;

/** Identity headers the gateway sets for the account service; client copies are stripped by Envoy first. */
export function identityHeaderNames(brand: string): string[] {
  return PRINCIPAL_FIELDS.map((f) => `x-${brand}-${f.replace(/_/g, '-')}`);
}

/** The hold ↔ dynamic metadata: its amount, whether it came out of a credit lease, the lease it is committed in. */
export function holdToMetadata(h: { readonly held: number; readonly leased: boolean; readonly lease: string | null }): Record<string, string> {
  return { held: String(h.held), ...(h.leased ? { leased: '1' } : {}), ...(h.lease ? { lease: h.lease } : {}) };
}

export function holdFromMetadata(md: Record<string, unknown> | undefined): { held: number | null; leased: boolean; lease: string | null } {
  const held = md?.held;
  const lease = md?.lease;
  return { held: typeof held === 'string' && held !== '' ? Number(held) : null, leased: md?.leased === '1', lease: typeof lease === 'string' && lease !== '' ? lease : null };
}

/** Principal ↔ dynamic metadata (a flat Struct of strings). */
export function principalToMetadata(p: Principal): Record<(typeof PRINCIPAL_FIELDS)[number], string> {
  return { tenant_id: p.tenantId, subject_id: p.subjectId, auth_method: p.method, scopes: p.scopes.join(' '), key_id: p.keyId ?? '', role: p.role ?? '' };
}

export function principalFromMetadata(md: Record<string, unknown> | undefined): Principal | null {
  if (!md || typeof md.tenant_id !== 'string' || typeof md.subject_id !== 'string') return null;
  const method = md.auth_method;
  if (method !== 'api_key' && method !== 'api_key_bearer' && method !== 'session') return null;
  const scopes = typeof md.scopes === 'string' && md.scopes ? md.scopes.split(' ') : [];
  const keyId = typeof md.key_id === 'string' && md.key_id ? md.key_id : null;
  const role = typeof md.role === 'string' && md.role ? md.role : null;
  return { tenantId: md.tenant_id, subjectId: md.subject_id, method, scopes, keyId, role };
}

function denied(err: GatewayError, requestId: string, retryAfter?: number): CheckResponse {
  const headers = [plainHeader('content-type', 'application/json')];
  for (const [k, v] of Object.entries(err.entry.headers ?? {})) headers.push(plainHeader(k.toLowerCase(), v));
  if (retryAfter !== undefined) headers.push(plainHeader('retry-after', String(retryAfter)));
  return {
    status: { code: GRPC_PERMISSION_DENIED, message: err.entry.code ?? 'denied', details: [] },
    deniedResponse: { status: { code: err.entry.status }, headers, body: JSON.stringify(envelope(err, requestId)) },
  };
}

export interface AuthzDeps {
  readonly gate: Gate;
  readonly brand: string;
  /** Provider key sent upstream as a bearer token; undefined sends none. */
  readonly upstreamKey: string | undefined;
  readonly log: Logger;
  /** Stopping: new requests are refused (503, Retry-After) while those in flight finish. */
  readonly lifecycle?: Lifecycle;
  /** Each check's duration and, when refused, its status and error code (metrics). */
  readonly observe?: (ms: number, path: string, refused: { readonly status: number; readonly code: string | null } | null) => void;
  /** A check that threw (Envoy answers with the 503 envelope). */
  readonly onFailure?: () => void;
  /** An admitted request whose check Envoy stopped waiting for: its hold goes back now. */
  readonly abandoned?: (requestId: string) => void;
}

/** Internal routing header: tells Envoy's route table how the response will flow. */
export const flowHeaderName = (brand: string): string => `x-${brand}-flow`;

/**
 * The only client headers the provider receives (an allow-list: what it needs to serve
 * the request). Everything else, credentials, cookies, OpenAI-Organization / -Project
 * (which could change whose provider account pays), SDK telemetry, is removed.
 */
const PROVIDER_HEADERS = new Set(['accept', 'x-request-id', 'x-forwarded-proto']);

/** Set by Envoy itself (a client's copy is replaced, not added): not counted as the client's. */
const SET_BY_ENVOY = new Set(['x-request-id', 'x-forwarded-proto']);

const OK_STATUS = { code: GRPC_OK, message: '', details: [] };

/** How many headers the client sent and their bytes (pseudo-headers and Envoy's own not counted). */
function clientHeaderSize(names: readonly string[], get: (n: string) => string | undefined): { headerCount: number; headerBytes: number } {
  const own = names.filter((n) => !n.startsWith(':') && !SET_BY_ENVOY.has(n));
  // Repeated names are joined with "," by get(): their values are counted once, with the separators.
  const headerBytes = own.reduce((sum, n) => sum + n.length, 0) + [...new Set(own)].reduce((sum, n) => sum + Buffer.byteLength(get(n) ?? ''), 0);
  return { headerCount: own.length, headerBytes };
}

/** ext_authz's Check, served with the lean CheckRequest decoder (check-request-decode.ts), below grpc-js's per-call stream (grpc-direct.ts). */
export interface AuthorizationHandler {
  check(call: UnaryCall<CheckInput>, callback: UnaryRespond<CheckResponse>): void;
}

/** The ext_authz adapter: Envoy's CheckRequest in, the gate's decision out. */
export function createAuthorizationService(deps: AuthzDeps): AuthorizationHandler {
  const identity = identityHeaderNames(deps.brand);
  const flowHeader = flowHeaderName(deps.brand);
  // To the provider: its own key, the flow for route selection, no client credentials or identity.
  const toProvider = (flow: 'stream' | 'buffer') => [
    ...(deps.upstreamKey ? [constantHeader('authorization', `Bearer ${deps.upstreamKey}`)] : []),
    // The body goes up re-serialised as JSON, whatever the client labelled it.
    constantHeader('content-type', 'application/json'),
    constantHeader('accept-encoding', 'identity'),
    constantHeader(flowHeader, flow),
  ];
  const providerHeaders = { stream: toProvider('stream'), buffer: toProvider('buffer') };
  const setForProvider = new Set([...providerHeaders.buffer.map((h) => h.header?.key ?? ''), 'content-length']);
  /** Every client header outside the allow-list (Envoy removes after it sets, so never one the gateway sets). */
  const notForProvider = (names: readonly string[]) =>
    names.filter((n) => !n.startsWith(':') && n !== 'host' && !PROVIDER_HEADERS.has(n) && !setForProvider.has(n));
  return {
    check(call, callback) {
      const { headers, body } = call.request;
      const requestId = headers.get('x-request-id') ?? '';
      const t0 = performance.now();
      if (deps.lifecycle?.draining) {
        deps.observe?.(performance.now() - t0, call.request.path, Errors.restarting);
        deps.log.info({ request_id: requestId, path: pathOnly(call.request.path), status: Errors.restarting.status, code: Errors.restarting.code }, 'request refused: stopping');
        callback(null, denied(gatewayError(Errors.restarting), requestId));
        return;
      }
      const keyCheckOnly = call.metadata.get(AUTHZ_PHASE_HEADER)[0] === 'key';
      const req = {
        path: call.request.path,
        method: call.request.method || (headers.get(':method') ?? ''),
        header(n: string) {
          return headers.get(n);
        },
        ...clientHeaderSize(headers.names, (n) => headers.get(n)),
        peer: call.request.peer,
        body,
        requestId,
      };
      const check = keyCheckOnly ? deps.gate.authenticate(req) : deps.gate.check(req);
      (deps.lifecycle ? deps.lifecycle.track(check) : check)
        .then((outcome) => {
          if (!outcome.ok) {
            deps.observe?.(performance.now() - t0, req.path, outcome.error.entry);
            // The path without its query string: a client may have put a key there.
            deps.log.info({ request_id: requestId, path: pathOnly(req.path), status: outcome.error.entry.status, code: outcome.error.entry.code }, 'request refused');
            callback(null, denied(outcome.error, requestId, outcome.retryAfter));
            return;
          }
          if (keyCheckOnly) {
            // Nothing changes yet: the full check with the body follows (and is the one observed).
            callback(null, { status: OK_STATUS, okResponse: undefined, dynamicMetadata: undefined });
            return;
          }
          deps.observe?.(performance.now() - t0, req.path, null);
          if (call.cancelled && outcome.inference) {
            // Too late: Envoy's timeout passed and it refused the request (503), so nothing
            // will process its response or claim its hold.
            deps.log.warn({ request_id: requestId, path: pathOnly(req.path) }, 'check finished after Envoy stopped waiting; hold released');
            deps.abandoned?.(requestId);
            return;
          }
          const p = outcome.principal;
          const fields = p ? principalToMetadata(p) : null;
          let setHeaders;
          let headersToRemove;
          if (outcome.inference) {
            // ext_proc replaces the body with exactly these bytes and keeps this content-length.
            setHeaders = [...providerHeaders[outcome.inference.stream ? 'stream' : 'buffer'], plainHeader('content-length', String(outcome.inference.upstreamBytes))];
            headersToRemove = notForProvider([...new Set(headers.names)]);
          } else {
            setHeaders = fields ? PRINCIPAL_FIELDS.map((f, i) => plainHeader(identity[i] as string, fields[f])) : [];
            headersToRemove = ['x-api-key'];
          }
          const metadata: Record<string, string> | undefined = fields
            ? { ...fields, ...(outcome.inference ? holdToMetadata(outcome.inference) : {}) }
            : undefined;
          callback(null, {
            status: OK_STATUS,
            okResponse: { headers: setHeaders, headersToRemove, responseHeadersToAdd: [], queryParametersToSet: [], queryParametersToRemove: [] },
            dynamicMetadata: metadata,
          });
        })
        .catch((err: unknown) => {
          deps.log.error({ request_id: requestId, err: (err as Error).name }, 'authorization failed');
          deps.onFailure?.();
          callback({ code: status.INTERNAL, details: 'internal' }, null);
        });
    },
  };
}

/** Every header only the gateway may set; Envoy removes client-sent copies before anything else runs. */
export function internalHeaderNames(brand: string): string[] {
  return [...identityHeaderNames(brand), flowHeaderName(brand)];
}
