import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { exportJWK, generateKeyPair, importJWK, SignJWT, type JWK } from 'jose';

/**
 * A development identity provider for local runs and tests: an ES256 key pair
 * on disk whose public half the local stack trusts (a JWKS file), and a
 * minting function for platform session tokens. Never used in production:
 * there the gateway trusts the real identity provider's JWKS.
 */
export const DEV_ISSUER = 'https://identity.svc.local';
export const DEV_AUDIENCE = 'svc-gateway';

export interface DevIdentity {
  readonly dir: string;
  readonly jwksFile: string;
  readonly privateJwkFile: string;
}

export async function ensureDevIdentity(dir: string): Promise<DevIdentity> {
  const jwksFile = join(dir, 'jwks.json');
  const privateJwkFile = join(dir, 'private.jwk');
  if (!existsSync(jwksFile) || !existsSync(privateJwkFile)) {
    mkdirSync(dir, { recursive: true });
    const { publicKey, privateKey } = await generateKeyPair('ES256', { extractable: true });
    const kid = `dev-${Date.now().toString(36)}`;
    const pub = { ...(await exportJWK(publicKey)), kid, alg: 'ES256', use: 'sig' };
    const priv = { ...(await exportJWK(privateKey)), kid, alg: 'ES256' };
    writeFileSync(privateJwkFile, JSON.stringify(priv), { mode: 0o600 });
    writeFileSync(jwksFile, JSON.stringify({ keys: [pub] }, null, 2));
  }
  return { dir, jwksFile, privateJwkFile };
}

export interface MintOptions {
  readonly userId: string;
  /** Workspace (tenant) ids, optionally with a role: "ten_x" or "ten_x:owner". */
  readonly workspaces: readonly string[];
  readonly ttlSeconds?: number;
  readonly issuer?: string;
  readonly audience?: string;
  /** Issue time override, seconds since the epoch (tests mint expired tokens). */
  readonly issuedAt?: number;
}

export async function mintSession(privateJwkFile: string, opts: MintOptions): Promise<string> {
  const jwk = JSON.parse(readFileSync(privateJwkFile, 'utf8')) as JWK;
  const key = await importJWK(jwk, 'ES256');
  const iat = opts.issuedAt ?? Math.floor(Date.now() / 1000);
  const workspaces = opts.workspaces.map((w) => {
    const [id, role = 'owner'] = w.split(':');
    return { id, role };
  });
  return new SignJWT({ workspaces })
    .setProtectedHeader({ alg: 'ES256', kid: jwk.kid, typ: 'JWT' })
    .setSubject(opts.userId)
    .setIssuer(opts.issuer ?? DEV_ISSUER)
    .setAudience(opts.audience ?? DEV_AUDIENCE)
    .setIssuedAt(iat)
    .setExpirationTime(iat + (opts.ttlSeconds ?? 3600))
    .sign(key);
}
