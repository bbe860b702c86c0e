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

describe('SessionVerifier: the claims a session needs, and the workspaces it carries', () => {
  /** A token signed by `idp` with exactly these claims (no defaults added). */
  async function signed(privateJwkFile: string, claims: Record<string, unknown>): Promise<string> {
    const { importJWK, SignJWT } = await import('jose');
    const jwk = JSON.parse(readFileSync(privateJwkFile, 'utf8')) as { kid: string };
    const key = await importJWK(jwk as never, 'ES256');
    return new SignJWT(claims).setProtectedHeader({ alg: 'ES256', kid: jwk.kid, typ: 'JWT' }).sign(key);
  }
  const now = () => Math.floor(Date.now() / 1000);
  const base = () => ({ sub: 'usr_1', iss: DEV_ISSUER, aud: DEV_AUDIENCE, iat: now(), exp: now() + 600 });

  it('a token without sub, exp or iat is no session; with all three it is', async () => {
    const idp = await ensureDevIdentity(join(dir, 'claims'));
    const v = new SessionVerifier(options({ jwksFile: idp.jwksFile, jwksUrl: null }));
    expect(v.status()).toMatchObject({ configured: true, source: 'file', keys_loaded: 1, last_refresh_ok: true });
    expect(await v.verify(await signed(idp.privateJwkFile, base()))).toMatchObject({ userId: 'usr_1', workspaces: [] });
    for (const missing of ['sub', 'exp', 'iat']) {
      const claims: Record<string, unknown> = base();
      delete claims[missing];
      expect(await v.verify(await signed(idp.privateJwkFile, claims))).toBeNull();
    }
  });

  it('a token issued longer ago than the longest session (plus the tolerance) is refused even if its exp is later', async () => {
    const idp = await ensureDevIdentity(join(dir, 'claims'));
    const v = new SessionVerifier(options({ jwksFile: idp.jwksFile, jwksUrl: null, maxLifetimeSeconds: 600, clockToleranceSeconds: 30 }));
    const fresh = { ...base(), iat: now() - 620, exp: now() + 10 }; // 620 s old: within 600 + 30
    expect(await v.verify(await signed(idp.privateJwkFile, { ...fresh, exp: fresh.iat + 600 }))).not.toBeNull();
    expect(await v.verify(await signed(idp.privateJwkFile, { ...base(), iat: now() - 640, exp: now() + 10 }))).toBeNull();
  });

  it('workspaces: ids as strings (members) or objects with an id and an optional role; anything else is ignored', async () => {
    const idp = await ensureDevIdentity(join(dir, 'claims'));
    const v = new SessionVerifier(options({ jwksFile: idp.jwksFile, jwksUrl: null }));
    const workspaces = ['ten_a', { id: 'ten_b', role: 'admin' }, { id: 'ten_c' }, { id: 7, role: 'owner' }, { role: 'owner' }, null, 5, { id: 'ten_d', role: 3 }];
    const s = await v.verify(await signed(idp.privateJwkFile, { ...base(), workspaces }));
    expect(s?.workspaces).toEqual([
      { id: 'ten_a', role: 'member' },
      { id: 'ten_b', role: 'admin' },
      { id: 'ten_c', role: 'member' },
      { id: 'ten_d', role: 'member' },
    ]);
    for (const claim of ['ten_a', { id: 'ten_a' }, 3]) {
      expect((await v.verify(await signed(idp.privateJwkFile, { ...base(), workspaces: claim })))?.workspaces).toEqual([]);
    }
  });

  it('not a JWT, or a JWKS file without keys: no session, and a JWKS without a key list is refused at start', async () => {
    const idp = await ensureDevIdentity(join(dir, 'claims'));
    const v = new SessionVerifier(options({ jwksFile: idp.jwksFile, jwksUrl: null }));
    for (const token of ['', 'abc', 'a.b', 'a.b.c.d', 'a.b.c', '!!.??.**']) expect(await v.verify(token)).toBeNull();
    const { writeFileSync } = await import('node:fs');
    const bad = join(dir, 'no-keys.json');
    writeFileSync(bad, JSON.stringify({ nope: [] }));
    expect(() => new SessionVerifier(options({ jwksFile: bad, jwksUrl: null }))).toThrow('JWKS without keys');
  });
});

describe('SessionVerifier: when the JWKS URL is fetched again', () => {
  let setups = 0;
  /** A verifier over an injected fetch of whatever `jwks()` returns, with a clock the test moves. */
  async function setup() {
    const a = await ensureDevIdentity(join(dir, `ra-${++setups}`));
    await new Promise((r) => setTimeout(r, 5)); // key ids are named after the millisecond they were made in
    const b = await ensureDevIdentity(join(dir, `rb-${setups}`));
    const kidOf = (f: string) => (JSON.parse(readFileSync(f, 'utf8')) as { keys: Array<{ kid: string }> }).keys[0]!.kid;
    expect(kidOf(a.jwksFile)).not.toBe(kidOf(b.jwksFile));
    let current = JSON.parse(readFileSync(a.jwksFile, 'utf8')) as unknown;
    let calls = 0;
    const refreshes: boolean[] = [];
    // The verifier's refresh clock (Date.now) moves with the test; jose checks the token's
    // times against the real clock (new Date()), so tokens are issued at the real time.
    const realNow = Date.now;
    let t = realNow();
    Date.now = () => t;
    const v = new SessionVerifier(
      options({
        jwksUrl: 'https://idp.example/jwks.json',
        refreshSeconds: 300,
        fetchJson: async () => {
          calls++;
          if (current === 'down') throw new Error('unreachable');
          return current;
        },
      }),
      (ok) => refreshes.push(ok),
    );
    const token = (which: 'a' | 'b') =>
      mintSession((which === 'a' ? a : b).privateJwkFile, { userId: 'u', workspaces: ['t'], issuedAt: Math.floor(realNow() / 1000) });
    return {
      v,
      token,
      rotate: () => (current = JSON.parse(readFileSync(b.jwksFile, 'utf8'))),
      down: () => (current = 'down'),
      advance: (s: number) => (t += s * 1000),
      calls: () => calls,
      refreshes,
      restore: () => (Date.now = realNow),
    };
  }

  it('once at first use, then only when stale (after refreshSeconds)', async () => {
    const s = await setup();
    try {
      expect(await s.v.verify(await s.token('a'))).not.toBeNull();
      expect(s.calls()).toBe(1);
      s.advance(299);
      expect(await s.v.verify(await s.token('a'))).not.toBeNull();
      expect(s.calls()).toBe(1);
      s.advance(2);
      expect(await s.v.verify(await s.token('a'))).not.toBeNull();
      expect(s.calls()).toBe(2);
      expect(s.refreshes).toEqual([true, true]);
    } finally {
      s.restore();
    }
  });

  it('a token with a key id not in the set fetches again, at most every 30 s; a known one does not', async () => {
    const s = await setup();
    try {
      expect(await s.v.verify(await s.token('a'))).not.toBeNull();
      s.rotate();
      s.advance(10);
      expect(await s.v.verify(await s.token('b'))).toBeNull(); // unknown kid, but fetched 10 s ago
      expect(s.calls()).toBe(1);
      s.advance(21);
      expect(await s.v.verify(await s.token('b'))).not.toBeNull(); // 31 s: fetched, the new key is there
      expect(s.calls()).toBe(2);
      s.advance(31);
      expect(await s.v.verify(await s.token('b'))).not.toBeNull(); // known now: no fetch
      expect(s.calls()).toBe(2);
    } finally {
      s.restore();
    }
  });

  it('a failed fetch keeps the keys it had, reports the failure, and the state says so', async () => {
    const s = await setup();
    try {
      expect(await s.v.verify(await s.token('a'))).not.toBeNull();
      s.down();
      s.advance(301);
      expect(await s.v.verify(await s.token('a'))).not.toBeNull();
      expect(s.refreshes).toEqual([true, false]);
      expect(s.v.status()).toMatchObject({ keys_loaded: 1, last_refresh_ok: false });
    } finally {
      s.restore();
    }
  });
});
