import type { sendUnaryData, ServerUnaryCall } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { Authorizer } from '../../domain/auth/authorize.js';
import type { Principal } from '../../domain/auth/principal.js';
import { envelope, type GatewayError } from '../../domain/errors.js';
import type { AuthorizationServer, CheckRequest, CheckResponse } from '../../generated/envoy/service/auth/v3/external_auth.js';
import type { Address } from '../../generated/envoy/config/core/v3/address.js';
import { plainHeader } from './headers.js';

/** Namespace Envoy stores ext_authz dynamic metadata under (forwarded to ext_proc). */
export const AUTHZ_NAMESPACE = 'envoy.filters.http.ext_authz';

const GRPC_OK = 0;
const GRPC_PERMISSION_DENIED = 7;

/** Identity headers the gateway sets for the account service; client copies are stripped by Envoy first. */
export function identityHeaderNames(brand: string): string[] {
  return [`x-${brand}-tenant-id`, `x-${brand}-subject-id`, `x-${brand}-auth-method`, `x-${brand}-scopes`, `x-${brand}-key-id`, `x-${brand}-role`];
}

export function peerAddress(address: Address | undefined): string | null {
  const a = address?.socketAddress?.address;
  return a ? a : null;
}

/** Principal ↔ dynamic metadata (a flat Struct of strings). */
export function principalToMetadata(p: Principal): Record<string, string> {
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

function denied(err: GatewayError, requestId: string): CheckResponse {
  const headers = [plainHeader('content-type', 'application/json')];
  for (const [k, v] of Object.entries(err.entry.headers ?? {})) headers.push(plainHeader(k.toLowerCase(), v));
  return {
    status: { code: GRPC_PERMISSION_DENIED, message: err.entry.code ?? 'denied', details: [] },
    deniedResponse: { status: { code: err.entry.status }, headers, body: JSON.stringify(envelope(err, requestId)) },
  };
}

/** The ext_authz adapter: Envoy's CheckRequest in, the domain's decision out. */
export function createAuthorizationService(deps: { authorizer: Authorizer; brand: string; log: Logger }): AuthorizationServer {
  const identity = identityHeaderNames(deps.brand);
  return {
    check(call: ServerUnaryCall<CheckRequest, CheckResponse>, callback: sendUnaryData<CheckResponse>) {
      const attrs = call.request.attributes;
      const http = attrs?.request?.http;
      const headers = http?.headers ?? {};
      const requestId = headers['x-request-id'] ?? '';
      deps.authorizer
        .authorize({ path: http?.path ?? '', header: (n) => headers[n], peer: peerAddress(attrs?.source?.address) })
        .then((outcome) => {
          if (!outcome.ok) {
            deps.log.info({ request_id: requestId, path: http?.path, status: outcome.error.entry.status, code: outcome.error.entry.code }, 'request refused');
            callback(null, denied(outcome.error, requestId));
            return;
          }
          const p = outcome.principal;
          const values = p ? [p.tenantId, p.subjectId, p.method, p.scopes.join(' '), p.keyId ?? '', p.role ?? ''] : [];
          const setHeaders = values.map((v, i) => plainHeader(identity[i] as string, v));
          callback(null, {
            status: { code: GRPC_OK, message: '', details: [] },
            okResponse: {
              headers: setHeaders,
              headersToRemove: ['x-api-key'],
              responseHeadersToAdd: [],
              queryParametersToSet: [],
              queryParametersToRemove: [],
            },
            dynamicMetadata: p ? principalToMetadata(p) : undefined,
          });
        })
        .catch((err: unknown) => {
          deps.log.error({ request_id: requestId, err: (err as Error).name }, 'authorization failed');
          callback({ code: 13, message: 'internal' } as never, null);
        });
    },
  };
}
