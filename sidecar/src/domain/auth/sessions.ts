import { readFileSync } from 'node:fs';
import { createLocalJWKSet, decodeProtectedHeader, jwtVerify, type JSONWebKeySet, type JWTPayload } from 'jose';

/**
 * Platform session tokens: JWTs signed by the identity provider, checked
 * against its public keys (a JWKS file or URL), issuer and audience. A
 * session lasts at most 60 minutes and cannot be revoked. Anything that does
 * not verify (not a JWT, unknown key id, bad signature, expired, wrong
 * issuer) is "undecodable" and the caller falls through to X-API-Key.
 */
export interface Workspace {
  readonly id: string;
  readonly role: string;
}

export interface Session {
  readonly userId: string;
  readonly workspaces: readonly Workspace[];
  readonly expiresAt: number;
}

export interface IdentityProviderState {
  configured: boolean;
  source: 'file' | 'url' | null;
  keys_loaded: number;
  last_refresh: string | null;
  last_refresh_ok: boolean | null;
}

export interface SessionVerifierOptions {
  readonly jwksFile: string | null;
  readonly jwksUrl: string | null;
  readonly issuer: string;
  readonly audience: string;
  readonly maxLifetimeSeconds: number;
  readonly clockToleranceSeconds: number;
  readonly refreshSeconds: number;
  readonly fetchTimeoutMs?: number;
  /**
   * Fetches the JWKS URL (the adapter verifies https against identity.tls);
   * default: the platform fetch, no redirects.
   */
  readonly fetchJson?: (url: string, timeoutMs: number) => Promise<unknown>;
}

async function platformFetchJson(url: string, timeoutMs: number): Promise<unknown> {
  const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), redirect: 'error' });
  if (!res.ok) throw new Error(`JWKS HTTP ${res.status}`);
  return res.json();
}

const JWT_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

export class SessionVerifier {
  private keySet: ReturnType<typeof createLocalJWKSet> | null = null;
  private kids = new Set<string>();
  private state: IdentityProviderState;
  private lastFetch = 0;
  private inflight: Promise<void> | null = null;

  constructor(
    private readonly opts: SessionVerifierOptions,
    /** Told about every load or fetch of the public keys (metrics). */
    private readonly onRefresh: (ok: boolean) => void = () => {},
  ) {
    const source = opts.jwksFile ? 'file' : opts.jwksUrl ? 'url' : null;
    this.state = { configured: source !== null, source, keys_loaded: 0, last_refresh: null, last_refresh_ok: null };
    if (opts.jwksFile) this.load(JSON.parse(readFileSync(opts.jwksFile, 'utf8')) as JSONWebKeySet);
  }

  status(): IdentityProviderState {
    return { ...this.state };
  }

  /** The session this bearer value carries, or null when it does not verify. */
  async verify(token: string): Promise<Session | null> {
    if (!this.state.configured || !JWT_SHAPE.test(token)) return null;
    let kid: string | undefined;
    try {
      kid = decodeProtectedHeader(token).kid;
    } catch {
      return null;
    }
    await this.refreshIfNeeded(kid);
    if (!this.keySet) return null;
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, this.keySet, {
        issuer: this.opts.issuer,
        audience: this.opts.audience,
        clockTolerance: this.opts.clockToleranceSeconds,
        maxTokenAge: this.opts.maxLifetimeSeconds + this.opts.clockToleranceSeconds,
        requiredClaims: ['sub', 'exp', 'iat'],
      }));
    } catch {
      return null;
    }
    const { sub, exp, iat } = payload as { sub: string; exp: number; iat: number };
    if (exp - iat > this.opts.maxLifetimeSeconds) return null;
    return { userId: sub, workspaces: readWorkspaces(payload.workspaces), expiresAt: exp };
  }

  private load(jwks: JSONWebKeySet): void {
    if (!jwks || !Array.isArray(jwks.keys)) throw new Error('JWKS without keys');
    this.keySet = createLocalJWKSet(jwks);
    this.kids = new Set(jwks.keys.map((k) => k.kid).filter((k): k is string => typeof k === 'string'));
    this.state.keys_loaded = jwks.keys.length;
    this.state.last_refresh = new Date().toISOString();
    this.state.last_refresh_ok = true;
    this.onRefresh(true);
  }

  /** URL source: fetch when stale, or when a token names an unknown key id (at most every 30 s). */
  private async refreshIfNeeded(kid: string | undefined): Promise<void> {
    const url = this.opts.jwksUrl;
    if (!url || this.opts.jwksFile) return;
    const now = Date.now();
    const stale = now - this.lastFetch > this.opts.refreshSeconds * 1000;
    const unknownKid = kid !== undefined && !this.kids.has(kid) && now - this.lastFetch > 30_000;
    if (!stale && !unknownKid && this.keySet) return;
    this.inflight ??= (async () => {
      this.lastFetch = Date.now();
      try {
        const get = this.opts.fetchJson ?? platformFetchJson;
        this.load((await get(url, this.opts.fetchTimeoutMs ?? 2000)) as JSONWebKeySet);
      } catch {
        this.state.last_refresh = new Date().toISOString();
        this.state.last_refresh_ok = false;
        this.onRefresh(false);
      } finally {
        this.inflight = null;
      }
    })();
    await this.inflight;
  }
}

function readWorkspaces(claim: unknown): Workspace[] {
  if (!Array.isArray(claim)) return [];
  const out: Workspace[] = [];
  for (const w of claim) {
    if (typeof w === 'string') out.push({ id: w, role: 'member' });
    else if (w && typeof w === 'object' && typeof (w as Workspace).id === 'string') {
      const role = (w as Workspace).role;
      out.push({ id: (w as Workspace).id, role: typeof role === 'string' ? role : 'member' });
    }
  }
  return out;
}
