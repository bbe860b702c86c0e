/** Authorizer: header precedence, route classes, key states, allowlists, scopes, store outage. */
import { describe, expect, it } from 'vitest';
import { Authorizer, bearerToken, type AuthOutcome } from '../../sidecar/src/domain/auth/authorize.js';
import { generateApiKey, hashApiKey } from '../../sidecar/src/domain/auth/keys.js';
import type { Session } from '../../sidecar/src/domain/auth/sessions.js';
import type { GatewayError } from '../../sidecar/src/domain/errors.js';
import { type KeyRecord, StoreUnavailableError } from '../../sidecar/src/store/contract.js';

const KEY = generateApiKey('svc');
const OTHER = generateApiKey('svc'); // well-formed but unknown

function record(over: Partial<KeyRecord> = {}): KeyRecord {
  return {
    id: 'key_1', tenantId: 'ten_1', hash: hashApiKey(KEY), last4: KEY.slice(-4), name: 'k',
    scopes: ['ai'], allowedIps: null, status: 'active', createdAt: '2026-01-01T00:00:00Z', revokedAt: null, ...over,
  };
}

const SESSION_TOKEN = 'header.payload.signature';
const session = (workspaces: Session['workspaces']): Session => ({ userId: 'usr_1', workspaces, expiresAt: 0 });

function authorizer(over: Partial<KeyRecord> = {}, findKey?: (hash: string) => Promise<KeyRecord | null>, sess: Session | null = null) {
  const seen: string[] = [];
  const rec = record(over);
  const a = new Authorizer({
    brand: 'svc',
    findKey: findKey ?? (async (hash) => (seen.push(hash), hash === rec.hash ? rec : null)),
    verifySession: async (token) => (token === SESSION_TOKEN ? sess : null),
  });
  return { a, seen };
}

const req = (path: string, headers: Record<string, string | undefined>, peer: string | null = '10.0.0.1') => ({
  path, peer, header: (name: string) => headers[name],
});

const code = (o: AuthOutcome) => (o.ok ? 'ok' : o.error.entry.code);

describe('credentials', () => {
  it('X-API-Key authorises an inference path', async () => {
    const o = await authorizer().a.authorize(req('/v1/chat/completions', { 'x-api-key': KEY }));
    expect(o).toEqual({
      ok: true, route: 'inference',
      principal: { subjectId: 'key_1', tenantId: 'ten_1', method: 'api_key', scopes: ['ai'], keyId: 'key_1', role: null },
    });
  });

  it('looks the key up by the sha256 of the whole key', async () => {
    const { a, seen } = authorizer();
    await a.authorize(req('/v1/models', { 'x-api-key': ` ${KEY} ` }));
    expect(seen).toEqual([hashApiKey(KEY)]);
  });

  it('a bearer key works on inference paths', async () => {
    const o = await authorizer().a.authorize(req('/v1/embeddings', { authorization: `Bearer ${KEY}` }));
    expect(o.ok && o.principal?.method).toBe('api_key_bearer');
  });

  it('a bearer key is ignored on account paths → AUTH_001', async () => {
    for (const path of ['/v1/credits', '/v1/accounts/me', '/v1/credits/balance?x=1']) {
      const o = await authorizer().a.authorize(req(path, { authorization: `Bearer ${KEY}` }));
      expect(o.ok ? null : o.error.entry).toMatchObject({ status: 401, code: 'AUTH_001' });
    }
    const viaHeader = await authorizer().a.authorize(req('/v1/credits', { 'x-api-key': KEY }));
    expect(viaHeader.ok && viaHeader.route).toBe('account');
  });

  it('an empty Authorization is ignored; garbage Authorization with a valid X-API-Key succeeds', async () => {
    const { a } = authorizer();
    expect(code(await a.authorize(req('/v1/models', { authorization: '' })))).toBe('invalid_api_key');
    const o = await a.authorize(req('/v1/models', { authorization: 'Basic Zm9vOmJhcg== junk', 'x-api-key': KEY }));
    expect(o.ok && o.principal?.method).toBe('api_key');
  });

  it('missing credentials: invalid_api_key on inference, AUTH_001 on account paths', async () => {
    const { a } = authorizer();
    const inf = await a.authorize(req('/v1/chat/completions', {}));
    expect(inf.ok ? null : inf.error.entry).toMatchObject({ status: 401, code: 'invalid_api_key' });
    const acct = await a.authorize(req('/v1/accounts', { 'x-api-key': '  ' }));
    expect(acct.ok ? null : acct.error.entry).toMatchObject({ status: 401, code: 'AUTH_001' });
  });

  it('unknown, revoked and malformed keys all get the same 401 entry', async () => {
    const entries: (GatewayError | null)[] = [];
    for (const [over, key] of [[{}, OTHER], [{ status: 'revoked' as const, revokedAt: '2026-02-01T00:00:00Z' }, KEY], [{}, 'svc_pk_short'], [{}, KEY.replace('svc_', 'acme_')]] as const) {
      const o = await authorizer(over).a.authorize(req('/v1/models', { 'x-api-key': key }));
      entries.push(o.ok ? null : o.error);
    }
    expect(new Set(entries.map((e) => e?.entry)).size).toBe(1);
    expect(entries[0]?.entry).toMatchObject({ status: 401, code: 'invalid_api_key' });
    expect(entries.every((e) => e?.message === entries[0]?.message)).toBe(true);
  });

  it('a malformed key never reaches the store', async () => {
    const { a, seen } = authorizer();
    await a.authorize(req('/v1/models', { 'x-api-key': 'svc_pk_' + '!'.repeat(43) }));
    expect(seen).toEqual([]);
  });
});

describe('allowlist', () => {
  const cases: [string, string[], string | null, boolean][] = [
    ['v4 single', ['203.0.113.7'], '203.0.113.7', true],
    ['v4 single, other peer', ['203.0.113.7'], '203.0.113.8', false],
    ['v4 CIDR', ['10.1.0.0/16'], '10.1.200.3', true],
    ['v4 CIDR, outside', ['10.1.0.0/16'], '10.2.0.1', false],
    ['v6 single', ['2001:db8::1'], '2001:db8::1', true],
    ['v6 CIDR', ['2001:db8:aa::/48'], '2001:db8:aa:ff::9', true],
    ['v6 CIDR, outside', ['2001:db8:aa::/48'], '2001:db8:ab::9', false],
    ['::ffff:-mapped v4', ['192.0.2.0/24'], '::ffff:192.0.2.44', true],
    ['missing peer', ['0.0.0.0/0'], null, false],
  ];
  it.each(cases)('%s', async (_name, allowedIps, peer, allowed) => {
    const o = await authorizer({ allowedIps }).a.authorize(req('/v1/models', { 'x-api-key': KEY }, peer));
    expect(code(o)).toBe(allowed ? 'ok' : 'invalid_api_key');
  });
});

describe('scopes and routes', () => {
  it.each([['admin'], ['full'], ['*']])('wildcard scope %s → scope_not_recognised, even with ai', async (wild) => {
    for (const scopes of [[wild], ['ai', wild]]) {
      const o = await authorizer({ scopes }).a.authorize(req('/v1/models', { 'x-api-key': KEY }));
      expect(o.ok ? null : o.error.entry).toMatchObject({ status: 403, code: 'scope_not_recognised' });
    }
  });

  it('no ai scope → insufficient_scope', async () => {
    for (const scopes of [[], ['billing'], ['AI']]) {
      const o = await authorizer({ scopes }).a.authorize(req('/v1/models', { 'x-api-key': KEY }));
      expect(o.ok ? null : o.error.entry).toMatchObject({ status: 403, code: 'insufficient_scope' });
    }
  });

  it('outside the prefix: no credentials → ok with principal null', async () => {
    for (const headers of [{}, { authorization: 'Basic abc' }]) {
      expect(await authorizer().a.authorize(req('/healthz', headers))).toEqual({ ok: true, principal: null, route: 'outside' });
    }
    expect((await authorizer().a.authorize(req('/v1', {}))).ok).toBe(true);
  });

  it('outside the prefix with a valid key → keyOutsidePrefix', async () => {
    for (const headers of [{ 'x-api-key': KEY }, { authorization: `bearer ${KEY}` }]) {
      const o = await authorizer().a.authorize(req('/admin/keys', headers));
      expect(o.ok ? null : o.error.entry).toMatchObject({ status: 403, code: 'AUTHZ_001' });
    }
  });
});

describe('store outage', () => {
  it('StoreUnavailableError → service_unavailable', async () => {
    const { a } = authorizer({}, async () => {
      throw new StoreUnavailableError(new Error('ECONNREFUSED'));
    });
    const o = await a.authorize(req('/v1/models', { 'x-api-key': KEY }));
    expect(o.ok ? null : o.error.entry).toMatchObject({ status: 503, code: 'service_unavailable' });
  });

  it('any other store error propagates (fails closed upstream)', async () => {
    const { a } = authorizer({}, async () => {
      throw new TypeError('bug');
    });
    await expect(a.authorize(req('/v1/models', { 'x-api-key': KEY }))).rejects.toThrow('bug');
  });
});

describe('workspace header and sessions', () => {
  it('a key of another tenant than X-Workspace-ID → the same 401', async () => {
    const o = await authorizer().a.authorize(req('/v1/models', { 'x-api-key': KEY, 'x-workspace-id': 'ten_2' }));
    expect(code(o)).toBe('invalid_api_key');
    expect(code(await authorizer().a.authorize(req('/v1/models', { 'x-api-key': KEY, 'x-workspace-id': 'ten_1' })))).toBe('ok');
  });

  it('a bearer that is not a session or a key on an account path → AUTH_001', async () => {
    const o = await authorizer().a.authorize(req('/v1/credits', { authorization: 'Bearer not-a-session' }));
    expect(o.ok ? null : o.error.entry).toMatchObject({ status: 401, code: 'AUTH_001' });
  });

  it('a session on an account path with one workspace → session principal', async () => {
    const { a } = authorizer({}, undefined, session([{ id: 'ten_9', role: 'owner' }]));
    expect(await a.authorize(req('/v1/accounts/me', { authorization: `Bearer ${SESSION_TOKEN}` }))).toEqual({
      ok: true, route: 'account',
      principal: { subjectId: 'usr_1', tenantId: 'ten_9', method: 'session', scopes: [], keyId: null, role: 'owner' },
    });
  });

  it('several workspaces need X-Workspace-ID naming one of them', async () => {
    const { a } = authorizer({}, undefined, session([{ id: 'ten_8', role: 'member' }, { id: 'ten_9', role: 'admin' }]));
    const auth = `Bearer ${SESSION_TOKEN}`;
    expect(code(await a.authorize(req('/v1/credits', { authorization: auth })))).toBe('AUTHZ_001');
    expect(code(await a.authorize(req('/v1/credits', { authorization: auth, 'x-workspace-id': 'ten_7' })))).toBe('AUTHZ_001');
    const o = await a.authorize(req('/v1/credits', { authorization: auth, 'x-workspace-id': 'ten_9' }));
    expect(o.ok && o.principal).toMatchObject({ tenantId: 'ten_9', role: 'admin' });
  });

  it('a session on an inference path → 503 identity_provider_unavailable, even with a key', async () => {
    const { a } = authorizer({}, undefined, session([{ id: 'ten_9', role: 'owner' }]));
    const o = await a.authorize(req('/v1/chat/completions', { authorization: `Bearer ${SESSION_TOKEN}`, 'x-api-key': KEY }));
    expect(o.ok ? null : o.error.entry).toMatchObject({ status: 503, code: 'identity_provider_unavailable' });
  });
});

describe('bearerToken', () => {
  it.each([
    ['Bearer abc', 'abc'], ['bearer  abc ', 'abc'], ['BEARER abc', 'abc'],
    ['', undefined], ['Bearer', undefined], ['Bearer a b', undefined], ['Basic abc', undefined],
  ])('%j → %j', (value, token) => {
    expect(bearerToken(value)).toBe(token);
  });
});
