import type { KeyRecord } from '../../store/contract.js';
import { StoreUnavailableError } from '../../store/contract.js';
import { Errors, gatewayError, type GatewayError } from '../errors.js';
import { IpAllowlist } from './ip-allowlist.js';
import { hashApiKey, looksLikeApiKey } from './keys.js';
import type { Principal } from './principal.js';
import { classifyPath, type RouteClass } from './routes.js';

/** What the authoriser needs to know about a request; no Envoy types. */
export interface AuthRequest {
  readonly path: string;
  readonly header: (name: string) => string | undefined;
  /** Direct TCP peer address, or null when Envoy did not report one. */
  readonly peer: string | null;
}

export type AuthOutcome =
  | { readonly ok: true; readonly principal: Principal; readonly route: RouteClass }
  /** Outside the prefix with no credentials: let the route answer (404). */
  | { readonly ok: true; readonly principal: null; readonly route: 'outside' }
  | { readonly ok: false; readonly error: GatewayError };

export interface AuthDeps {
  readonly brand: string;
  readonly findKey: (hash: string) => Promise<KeyRecord | null>;
}

const REQUIRED_SCOPE = 'ai';
const WILDCARD_SCOPES = new Set(['admin', 'full', '*']);

const deny = (entry = Errors.invalidApiKey): AuthOutcome => ({ ok: false, error: gatewayError(entry) });

/** Splits `Authorization: Bearer <token>`; an empty or non-bearer value counts as absent. */
export function bearerToken(value: string | undefined): string | undefined {
  if (!value) return undefined;
  const m = /^\s*bearer\s+(\S+)\s*$/i.exec(value);
  return m ? m[1] : undefined;
}

export class Authorizer {
  private readonly allowlists = new Map<string, IpAllowlist>();

  constructor(private readonly deps: AuthDeps) {}

  async authorize(req: AuthRequest): Promise<AuthOutcome> {
    const route = classifyPath(req.path);
    const xApiKey = req.header('x-api-key')?.trim() || undefined;
    const bearer = bearerToken(req.header('authorization'));

    let presented: string | undefined;
    let method: Principal['method'] = 'api_key';
    if (xApiKey) presented = xApiKey;
    else if (bearer && route !== 'account') {
      presented = bearer;
      method = 'api_key_bearer';
    }
    if (!presented) {
      if (route === 'outside') return { ok: true, principal: null, route };
      return deny(route === 'account' ? Errors.missingCredentials : Errors.invalidApiKey);
    }
    if (!looksLikeApiKey(presented, this.deps.brand)) return deny();

    let key: KeyRecord | null;
    try {
      key = await this.deps.findKey(hashApiKey(presented));
    } catch (err) {
      if (err instanceof StoreUnavailableError) return deny(Errors.serviceUnavailable);
      throw err;
    }
    if (!key || key.status !== 'active') return deny();
    if (key.allowedIps && !this.allowlistOf(key).allows(req.peer)) return deny();
    if (route === 'outside') return deny(Errors.keyOutsidePrefix);
    if (key.scopes.some((s) => WILDCARD_SCOPES.has(s))) return deny(Errors.scopeNotRecognised);
    if (!key.scopes.includes(REQUIRED_SCOPE)) return deny(Errors.insufficientScope);

    return {
      ok: true,
      route,
      principal: { subjectId: key.id, tenantId: key.tenantId, method, scopes: key.scopes, keyId: key.id },
    };
  }

  private allowlistOf(key: KeyRecord): IpAllowlist {
    const cacheKey = `${key.id}:${key.allowedIps?.join(',')}`;
    let list = this.allowlists.get(cacheKey);
    if (!list) {
      list = new IpAllowlist(key.allowedIps ?? []);
      if (this.allowlists.size > 10_000) this.allowlists.clear();
      this.allowlists.set(cacheKey, list);
    }
    return list;
  }
}
