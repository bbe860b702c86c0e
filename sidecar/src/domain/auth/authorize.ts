import type { KeyRecord } from '../../store/contract.js';
import { StoreUnavailableError } from '../../store/contract.js';
import { Errors, gatewayError, type ErrorEntry, type GatewayError } from '../errors.js';
import { IpAllowlist } from './ip-allowlist.js';
import { hashApiKey, looksLikeApiKey } from './keys.js';
import type { Principal } from './principal.js';
import { classifyPath, pathOnly, type RouteClass } from './routes.js';
import { API_PREFIX } from '../../api-prefix.js';
import type { Session } from './sessions.js';

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
  /** A verified platform session, or null when the bearer value does not verify. */
  readonly verifySession: (token: string) => Promise<Session | null>;
}

const REQUIRED_SCOPE = 'ai';
const WILDCARD_SCOPES = new Set(['admin', 'full', '*']);

const isWhoami = (path: string): boolean => pathOnly(path) === `${API_PREFIX}/whoami`;

const deny = (entry: ErrorEntry): AuthOutcome => ({ ok: false, error: gatewayError(entry) });

/** Splits `Authorization: Bearer <token>`; an empty or non-bearer value counts as absent. */
export function bearerToken(value: string | undefined): string | undefined {
  if (!value) return undefined;
  const m = /^\s*bearer\s+(\S+)\s*$/i.exec(value);
  return m ? m[1] : undefined;
}

/**
 * The spec's authentication rules, in order:
 * a bearer that verifies as a platform session wins over a key (rule 2) and
 * is accepted on /credits* and /accounts* only (rule 11: 503 elsewhere); a
 * bearer that does not verify falls through to X-API-Key (rule 3); a key is
 * looked up by the SHA-256 of the whole key (rule 5), must be active, pass
 * its IP allowlist (rule 10), carry no wildcard scope (rule 7) and carry
 * `ai` (rule 6), and is valid only under the prefix (rule 8). Every key
 * failure is the same 401 (rule 9).
 */
export class Authorizer {
  private readonly allowlists = new Map<string, IpAllowlist>();

  constructor(private readonly deps: AuthDeps) {}

  async authorize(req: AuthRequest): Promise<AuthOutcome> {
    const route = classifyPath(req.path);
    const xApiKey = req.header('x-api-key')?.trim() || undefined;
    const bearer = bearerToken(req.header('authorization'));
    const workspace = req.header('x-workspace-id')?.trim() || undefined;
    // One answer for every key failure (rule 9): missing, malformed, unknown, revoked, other tenant, IP refused.
    const keyFailure = route === 'account' ? Errors.missingCredentials : Errors.invalidApiKey;

    const session = bearer ? await this.deps.verifySession(bearer) : null;
    if (session) {
      // The identity echo answers every credential form; other inference paths take keys only (rule 11).
      if (route === 'inference' && !isWhoami(req.path)) return deny(Errors.identityProviderUnavailable);
      if (route === 'outside') return { ok: true, principal: null, route };
      return this.sessionPrincipal(session, workspace, route);
    }

    // Key as bearer: inference paths only, and only without X-API-Key.
    const presented = xApiKey ?? (route !== 'account' ? bearer : undefined);
    const method: Principal['method'] = xApiKey ? 'api_key' : 'api_key_bearer';
    if (!presented) {
      if (route === 'outside') return { ok: true, principal: null, route };
      return deny(keyFailure);
    }
    if (!looksLikeApiKey(presented, this.deps.brand)) return deny(keyFailure);

    let key: KeyRecord | null;
    try {
      key = await this.deps.findKey(hashApiKey(presented));
    } catch (err) {
      if (err instanceof StoreUnavailableError) return deny(Errors.serviceUnavailable);
      throw err;
    }
    if (!key || key.status !== 'active') return deny(keyFailure);
    if (workspace !== undefined && workspace !== key.tenantId) return deny(keyFailure); // a key of another tenant
    if (key.allowedIps && !this.allowlistOf(key).allows(req.peer)) return deny(keyFailure);
    if (route === 'outside') return deny(Errors.keyOutsidePrefix);
    if (key.scopes.some((s) => WILDCARD_SCOPES.has(s))) return deny(Errors.scopeNotRecognised);
    if (!key.scopes.includes(REQUIRED_SCOPE)) return deny(Errors.insufficientScope);

    return {
      ok: true,
      route,
      principal: { subjectId: key.id, tenantId: key.tenantId, method, scopes: key.scopes, keyId: key.id, role: null },
    };
  }

  private sessionPrincipal(session: Session, workspace: string | undefined, route: RouteClass): AuthOutcome {
    const chosen =
      workspace !== undefined
        ? session.workspaces.find((w) => w.id === workspace)
        : session.workspaces.length === 1
          ? session.workspaces[0]
          : undefined;
    if (!chosen) return deny(Errors.noWorkspace);
    return {
      ok: true,
      route,
      principal: { subjectId: session.userId, tenantId: chosen.id, method: 'session', scopes: [], keyId: null, role: chosen.role },
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
