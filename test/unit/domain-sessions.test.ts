import { createServer, type Server } from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SessionVerifier } from '../../sidecar/src/domain/auth/sessions.js';
import { DEV_AUDIENCE, DEV_ISSUER, ensureDevIdentity, mintSession } from '../../sidecar/stack/dev-idp.js';

/** Platform session tokens against a JWKS served over HTTP: verification, key rotation, provider state. */
let server: Server;
let url = '';
let served: unknown = { keys: [] };
let fetches = 0;
const dir = mkdtempSync(join(tmpdir(), 'idp-'));

beforeAll(async () => {
  server = createServer((_req, res) => {
    fetches++;
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(served));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}/jwks.json`;
});
afterAll(async () => {
  await new Promise<void>((r) => server.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

const options = (over: Partial<ConstructorParameters<typeof SessionVerifier>[0]> = {}) => ({
  jwksFile: null,
  jwksUrl: url,
  issuer: DEV_ISSUER,
  audience: DEV_AUDIENCE,
  maxLifetimeSeconds: 3600,
  clockToleranceSeconds: 30,
  refreshSeconds: 300,
  ...over,
});

describe('SessionVerifier with a JWKS URL', () => {
  it('verifies a token signed by a served key and reports the provider state', async () => {
    const a = await ensureDevIdentity(join(dir, 'a'));
    served = JSON.parse(readFileSync(a.jwksFile, 'utf8'));
    const v = new SessionVerifier(options());
    expect(v.status()).toMatchObject({ configured: true, source: 'url', keys_loaded: 0 });
    const token = await mintSession(a.privateJwkFile, { userId: 'usr_1', workspaces: ['ten_1:owner', 'ten_2'] });
    const s = await v.verify(token);
    expect(s).toMatchObject({ userId: 'usr_1', workspaces: [{ id: 'ten_1', role: 'owner' }, { id: 'ten_2', role: 'owner' }] });
    expect(v.status()).toMatchObject({ keys_loaded: 1, last_refresh_ok: true });
  });

  it('picks up a rotated key when a token names an unknown key id (at most every 30 s)', async () => {
    const a = await ensureDevIdentity(join(dir, 'a'));
    const b = await ensureDevIdentity(join(dir, 'b'));
    served = JSON.parse(readFileSync(a.jwksFile, 'utf8'));
    const v = new SessionVerifier(options());
    expect(await v.verify(await mintSession(a.privateJwkFile, { userId: 'u', workspaces: ['t'] }))).not.toBeNull();
    served = JSON.parse(readFileSync(b.jwksFile, 'utf8')); // the provider rotates its key
    const before = fetches;
    // Within 30 s of the last fetch an unknown kid does not trigger another fetch: undecodable.
    expect(await v.verify(await mintSession(b.privateJwkFile, { userId: 'u', workspaces: ['t'] }))).toBeNull();
    expect(fetches).toBe(before);
    const later = new SessionVerifier(options({ refreshSeconds: 1 }));
    expect(await later.verify(await mintSession(b.privateJwkFile, { userId: 'u', workspaces: ['t'] }))).not.toBeNull();
  });

  it('refuses wrong issuer, wrong audience, expired, too long-lived and tampered tokens', async () => {
    const a = await ensureDevIdentity(join(dir, 'a'));
    served = JSON.parse(readFileSync(a.jwksFile, 'utf8'));
    const v = new SessionVerifier(options());
    const mint = (o: Parameters<typeof mintSession>[1]) => mintSession(a.privateJwkFile, o);
    const now = Math.floor(Date.now() / 1000);
    for (const t of [
      await mint({ userId: 'u', workspaces: ['t'], issuer: 'https://evil.example' }),
      await mint({ userId: 'u', workspaces: ['t'], audience: 'other' }),
      await mint({ userId: 'u', workspaces: ['t'], issuedAt: now - 7200 }),
      await mint({ userId: 'u', workspaces: ['t'], ttlSeconds: 7200 }),
    ]) {
      expect(await v.verify(t)).toBeNull();
    }
    const good = await mint({ userId: 'u', workspaces: ['t'] });
    const [h, p, sig] = good.split('.');
    const forged = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(p!, 'base64url').toString()), sub: 'admin' })).toString('base64url');
    expect(await v.verify(`${h}.${forged}.${sig}`)).toBeNull();
    expect(await v.verify('svc_pk_notajwt')).toBeNull();
  });

  it('an unreachable JWKS URL makes every session undecodable and says so', async () => {
    const v = new SessionVerifier(options({ jwksUrl: 'http://127.0.0.1:1/jwks.json' }));
    const a = await ensureDevIdentity(join(dir, 'a'));
    expect(await v.verify(await mintSession(a.privateJwkFile, { userId: 'u', workspaces: ['t'] }))).toBeNull();
    expect(v.status()).toMatchObject({ configured: true, keys_loaded: 0, last_refresh_ok: false });
  });

  it('without any JWKS nothing is a session', async () => {
    const v = new SessionVerifier(options({ jwksUrl: null }));
    expect(v.status()).toMatchObject({ configured: false, source: null });
    const a = await ensureDevIdentity(join(dir, 'a'));
    expect(await v.verify(await mintSession(a.privateJwkFile, { userId: 'u', workspaces: ['t'] }))).toBeNull();
  });
});
