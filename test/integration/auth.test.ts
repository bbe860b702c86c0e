import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { startGateway, type TestGateway } from '../harness/gateway.js';
import { call, expectEnvelope, getFrom, post } from '../harness/http.js';

/** Every authentication rule of the spec (1-15), through real Envoy. */
let gw: TestGateway;
let token: string; // a session for the test tenant
let base6: string; // the gateway over IPv6 loopback

beforeAll(async () => {
  gw = await startGateway({ store: 'redis', config: { listen: { gateway: { host: '::' } } } });
  token = await gw.session({ workspaces: [`${gw.tenantId}:owner`] });
  base6 = gw.base.replace('127.0.0.1', '[::1]');
});
afterAll(async () => {
  await gw?.stop();
});

const bearer = (t: string) => ({ authorization: `Bearer ${t}` });
const chatBody = { model: 'svc-quick', messages: [{ role: 'user', content: 'hi' }] };
const inference = () => [
  () => call(`${gw.base}/models`, { headers: bearer(gw.key) }),
  () => call(`${gw.base}/chat/completions`, { method: 'POST', body: JSON.stringify(chatBody), headers: { ...bearer(gw.key), 'content-type': 'application/json' } }),
  () => call(`${gw.base}/embeddings`, { method: 'POST', body: JSON.stringify({ model: 'svc-embed', input: 'x' }), headers: { ...bearer(gw.key), 'content-type': 'application/json' } }),
];
const me = (headers: Record<string, string>) => call(`${gw.base}/accounts/me`, { headers });
const newKey = async (opts: { scopes?: string[]; allowed_ips?: string[] } = {}) => (await gw.admin.createKey(gw.tenantId, opts)).key;
const modelsFrom = (localAddress: string, key: string) => getFrom(localAddress, `${gw.base}/models`, { 'x-api-key': key });

describe('credential forms (rules 1, 4, 15)', () => {
  it('X-API-Key works on inference paths, /credits* and /accounts*', async () => {
    expect((await call(`${gw.base}/models`, { key: gw.key })).status).toBe(200);
    expectEnvelope(await call(`${gw.base}/credits`, { key: gw.key }), 404, null); // billing not enabled
    const m = await me({ 'x-api-key': gw.key });
    expect(m.status).toBe(200);
    expect(m.json).toMatchObject({ tenant_id: gw.tenantId, auth_method: 'api_key' });
  });

  it('the key as a bearer works on models, chat and embeddings', async () => {
    for (const req of inference()) expect((await req()).status).toBe(200);
  });

  it('the key as a bearer is a 401 on /credits* and /accounts*', async () => {
    expectEnvelope(await call(`${gw.base}/credits/balance`, { headers: bearer(gw.key) }), 401, 'AUTH_001', 'authentication_error');
    expectEnvelope(await me(bearer(gw.key)), 401, 'AUTH_001', 'authentication_error');
  });

  it('an empty Authorization value is ignored; a garbage one beside a valid X-API-Key too', async () => {
    expect((await call(`${gw.base}/models`, { key: gw.key, headers: { authorization: '' } })).status).toBe(200);
    expect((await call(`${gw.base}/models`, { key: gw.key, headers: { authorization: 'Bearer garbage.not.jwt' } })).status).toBe(200);
    expect((await call(`${gw.base}/models`, { key: gw.key, headers: { authorization: 'Basic Zm9vOmJhcg==' } })).status).toBe(200);
  });

  it('no credentials at all: 401 invalid_api_key on inference paths, AUTH_001 "Missing credentials" on account paths', async () => {
    expectEnvelope(await call(`${gw.base}/models`), 401, 'invalid_api_key', 'invalid_request_error');
    const a = await call(`${gw.base}/credits`);
    expectEnvelope(a, 401, 'AUTH_001', 'authentication_error');
    expect(a.json.error.message).toBe('Missing credentials');
  });
});

describe('platform sessions (rules 2, 3, 11; issue: workspaces)', () => {
  it('a session works on /accounts* and /credits*', async () => {
    const m = await me(bearer(token));
    expect(m.status).toBe(200);
    expect(m.json).toMatchObject({ tenant_id: gw.tenantId, subject_id: 'usr_test', auth_method: 'session', role: 'owner' });
    expectEnvelope(await call(`${gw.base}/credits`, { headers: bearer(token) }), 404, null);
  });

  it('X-Workspace-ID picks the workspace; one the person is not in is refused', async () => {
    // A person not yet in the account records: the claim brings them in with the claimed role.
    const multi = await gw.session({ userId: 'usr_multi', workspaces: ['ten_other:member', `${gw.tenantId}:admin`] });
    const picked = await me({ ...bearer(multi), 'x-workspace-id': gw.tenantId });
    expect(picked.json).toMatchObject({ tenant_id: gw.tenantId, role: 'admin' });
    const other = await me({ ...bearer(multi), 'x-workspace-id': 'ten_other' });
    expect(other.json.tenant_id).toBe('ten_other');
    const notMine = await me({ ...bearer(multi), 'x-workspace-id': 'ten_nope' });
    expectEnvelope(notMine, 403, 'AUTHZ_001', 'permission_error');
    expect(notMine.json.error.message).toContain("'error': 'no_workspace'");
    expectEnvelope(await me(bearer(multi)), 403, 'AUTHZ_001'); // several workspaces, none named
  });

  it('a session lasts 60 minutes: issued 59 minutes ago it is a session, 61 minutes ago it falls through to the key', async () => {
    const now = Math.floor(Date.now() / 1000);
    const fresh = await gw.session({ workspaces: [gw.tenantId], issuedAt: now - 59 * 60 });
    const stale = await gw.session({ workspaces: [gw.tenantId], issuedAt: now - 61 * 60 });
    expect((await me({ ...bearer(fresh), 'x-api-key': gw.key })).json.auth_method).toBe('session');
    expect((await me({ ...bearer(stale), 'x-api-key': gw.key })).json.auth_method).toBe('api_key');
  });

  it('a session wins over a key sent beside it', async () => {
    const m = await me({ ...bearer(token), 'x-api-key': gw.key });
    expect(m.json.auth_method).toBe('session');
  });

  it('undecodable bearers (not a JWT, foreign signature, expired, wrong audience) fall through to X-API-Key', async () => {
    const foreign = await gw.foreignSession({ workspaces: [gw.tenantId] });
    const expired = await gw.session({ workspaces: [gw.tenantId], issuedAt: Math.floor(Date.now() / 1000) - 7200 });
    const tooLong = await gw.session({ workspaces: [gw.tenantId], ttlSeconds: 24 * 3600 });
    const wrongAud = await gw.session({ workspaces: [gw.tenantId], audience: 'someone-else' });
    for (const t of ['not-a-jwt', foreign, expired, tooLong, wrongAud]) {
      const m = await me({ ...bearer(t), 'x-api-key': gw.key });
      expect(m.status, t).toBe(200);
      expect(m.json.auth_method).toBe('api_key');
      expect((await call(`${gw.base}/models`, { key: gw.key, headers: bearer(t) })).status).toBe(200);
      // Without X-API-Key: the 401s of rule 9 (inference) and the account-service family.
      expectEnvelope(await call(`${gw.base}/models`, { headers: bearer(t) }), 401, 'invalid_api_key');
      expectEnvelope(await me(bearer(t)), 401, 'AUTH_001');
    }
  });

  it('a verifiable session on an inference path → 503 identity_provider_unavailable with Retry-After: 30', async () => {
    const cases = [
      call(`${gw.base}/models`, { headers: bearer(token) }),
      post(`${gw.base}/chat/completions`, chatBody, null, bearer(token)),
      post(`${gw.base}/embeddings`, { model: 'svc-embed', input: 'x' }, null, bearer(token)),
      call(`${gw.base}/models`, { headers: bearer(token), key: gw.key }), // the session still wins
    ];
    for (const r of await Promise.all(cases)) {
      expectEnvelope(r, 503, 'identity_provider_unavailable', 'api_error');
      expect(r.headers.get('retry-after')).toBe('30');
    }
  });
});

describe('scopes (rules 5-8)', () => {
  it('a key without ai → 403 insufficient_scope naming the scope, on every route, /models included', async () => {
    const k = await newKey({ scopes: ['billing'] });
    const routes = [
      call(`${gw.base}/models`, { key: k }),
      call(`${gw.base}/models/svc-core`, { key: k }),
      post(`${gw.base}/chat/completions`, chatBody, k),
      post(`${gw.base}/embeddings`, { model: 'svc-embed', input: 'x' }, k),
      call(`${gw.base}/usage`, { key: k }),
      call(`${gw.base}/whoami`, { key: k }),
      call(`${gw.base}/credits`, { key: k }),
      me({ 'x-api-key': k }),
    ];
    for (const r of await Promise.all(routes)) {
      expectEnvelope(r, 403, 'insufficient_scope', 'permission_error');
      expect(r.json.error.message).toContain('"ai"');
    }
  });

  it.each([['admin'], ['full'], ['*']])('a key carrying %s → 403 scope_not_recognised, on every route', async (scope) => {
    const k = await newKey({ scopes: ['ai', scope] });
    const routes = [
      call(`${gw.base}/models`, { key: k }),
      post(`${gw.base}/chat/completions`, chatBody, k),
      post(`${gw.base}/embeddings`, { model: 'svc-embed', input: 'x' }, k),
      call(`${gw.base}/usage`, { key: k }),
      call(`${gw.base}/whoami`, { key: k }),
      me({ 'x-api-key': k }),
    ];
    for (const r of await Promise.all(routes)) expectEnvelope(r, 403, 'scope_not_recognised', 'permission_error');
  });

  it('a key outside the gateway prefix → 403; without a key such paths are a plain 404', async () => {
    const r = await call(`${gw.base.replace('/v1', '')}/admin/keys`, { key: gw.key });
    expect(r.status).toBe(403);
    expect(r.json.error.code).toBe('AUTHZ_001');
    const anon = await call(`${gw.base.replace('/v1', '')}/admin/keys`);
    expect(anon.status).toBe(404);
    // The health path too: a load balancer's probe (no credentials) passes, a key does not.
    expect((await call(`${gw.stack.gatewayUrl}/healthz`)).status).toBe(200);
    const keyed = await call(`${gw.stack.gatewayUrl}/healthz`, { key: gw.key });
    expect(keyed.status).toBe(403);
    expect(keyed.json.error.code).toBe('AUTHZ_001');
  });
});

describe('401 for every key failure (rule 9)', () => {
  it('missing, unknown, revoked, other-tenant and IP-refused keys share one 401', async () => {
    const revoked = await gw.admin.createKey(gw.tenantId, {});
    await gw.admin.revokeKey(revoked.id);
    const refusedIp = await newKey({ allowed_ips: ['192.0.2.1'] });
    const replies = [
      await call(`${gw.base}/models`),
      await call(`${gw.base}/models`, { key: 'svc_pk_' + 'b'.repeat(43) }),
      await call(`${gw.base}/models`, { key: revoked.key }),
      await call(`${gw.base}/models`, { key: gw.key, headers: { 'x-workspace-id': 'ten_someone_else' } }),
      await call(`${gw.base}/models`, { key: refusedIp }),
    ];
    for (const r of replies) expectEnvelope(r, 401, 'invalid_api_key', 'invalid_request_error');
    expect(new Set(replies.map((r) => r.json.error.message)).size).toBe(1);
  });
});

describe('IP allowlist (rule 10): only the direct peer counts', () => {
  it('single addresses and CIDR ranges, IPv4', async () => {
    expect((await call(`${gw.base}/models`, { key: await newKey({ allowed_ips: ['127.0.0.1'] }) })).status).toBe(200);
    expect((await call(`${gw.base}/models`, { key: await newKey({ allowed_ips: ['10.0.0.0/8', '127.0.0.0/8'] }) })).status).toBe(200);
  });

  it('forwarding headers never change the decision', async () => {
    const k = await newKey({ allowed_ips: ['203.0.113.9'] });
    const spoof = { 'x-forwarded-for': '203.0.113.9', forwarded: 'for=203.0.113.9', 'x-real-ip': '203.0.113.9', 'x-envoy-external-address': '203.0.113.9' };
    expectEnvelope(await call(`${gw.base}/models`, { key: k, headers: spoof }), 401, 'invalid_api_key');
    const local = await newKey({ allowed_ips: ['127.0.0.1'] });
    expect((await call(`${gw.base}/models`, { key: local, headers: { 'x-forwarded-for': '198.51.100.1' } })).status).toBe(200);
  });

  it('the client address counts, not the listener it connected to (client on 127.0.0.2, gateway on 127.0.0.1)', async () => {
    const fromOther = await newKey({ allowed_ips: ['127.0.0.2'] });
    const listenerOnly = await newKey({ allowed_ips: ['127.0.0.1'] });
    expect((await modelsFrom('127.0.0.2', fromOther)).status).toBe(200);
    expectEnvelope(await modelsFrom('127.0.0.1', fromOther), 401, 'invalid_api_key');
    expectEnvelope(await modelsFrom('127.0.0.2', listenerOnly), 401, 'invalid_api_key');
    expect((await modelsFrom('127.0.0.1', listenerOnly)).status).toBe(200);
  });

  it('an IPv6 peer: listed ::1 passes over IPv6 and is refused over IPv4; v6 CIDR', async () => {
    const k = await newKey({ allowed_ips: ['::1'] });
    expect((await call(`${base6}/models`, { key: k })).status).toBe(200);
    expectEnvelope(await call(`${gw.base}/models`, { key: k }), 401, 'invalid_api_key');
    expect((await call(`${base6}/models`, { key: await newKey({ allowed_ips: ['::/64'] }) })).status).toBe(200);
    expectEnvelope(await call(`${base6}/models`, { key: await newKey({ allowed_ips: ['2001:db8::/32'] }) }), 401, 'invalid_api_key');
  });
});

describe('identity is set by the gateway (issue 3 item 8)', () => {
  it('client-sent identity headers are replaced before the account service sees them', async () => {
    const m = await me({ 'x-api-key': gw.key, 'x-svc-tenant-id': 'ten_evil', 'x-svc-auth-method': 'session', 'x-svc-role': 'owner' });
    expect(m.json).toMatchObject({ tenant_id: gw.tenantId, auth_method: 'api_key', role: null });
  });

  it('keys and session tokens never appear in a log line', async () => {
    await me(bearer(token));
    await call(`${gw.base}/models`, { key: gw.key });
    const logs = gw.stack.logs();
    expect(logs).not.toContain(gw.key);
    expect(logs).not.toContain(token);
    expect(logs).not.toContain(token.split('.')[2]);
  });
});

describe('GET /v1/whoami', () => {
  it('reports the key, the tenant and the identity provider', async () => {
    const r = await call(`${gw.base}/whoami`, { key: gw.key });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({
      object: 'whoami',
      tenant_id: gw.tenantId,
      auth_method: 'api_key',
      scopes: ['ai'],
      identity_provider: { configured: true, source: 'file', keys_loaded: 1 },
    });
    expect(r.json.subject_id).toMatch(/^key_/);
    expect(JSON.stringify(r.json)).not.toContain(gw.key);
  });

  it('answers a bearer key and a session too', async () => {
    expect((await call(`${gw.base}/whoami`, { headers: bearer(gw.key) })).json.auth_method).toBe('api_key_bearer');
    const s = await call(`${gw.base}/whoami`, { headers: bearer(token) });
    expect(s.json).toMatchObject({ auth_method: 'session', subject_id: 'usr_test', tenant_id: gw.tenantId, role: 'owner' });
  });
});

describe('the official openai client, both ways', () => {
  it('key as apiKey (bearer)', async () => {
    const c = new OpenAI({ baseURL: gw.base, apiKey: gw.key, maxRetries: 0 });
    expect((await c.models.list()).data).toHaveLength(8);
  });

  it('key in X-API-Key with the SDK Authorization header suppressed (openai-node v6 spells it null)', async () => {
    const c = new OpenAI({ baseURL: gw.base, apiKey: 'x', defaultHeaders: { 'X-API-Key': gw.key, Authorization: null }, maxRetries: 0 });
    const res = await c.chat.completions.create(chatBody as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(res.model).toBe('svc-quick');
  });

  it('key in X-API-Key while the SDK sends an empty Authorization value', async () => {
    // openai-node v6 refuses an empty value itself; a client that sends one (rule 4) is served.
    const emptyAuth: typeof fetch = (url, init) => {
      const headers = new Headers(init?.headers);
      headers.set('authorization', '');
      return fetch(url, { ...init, headers });
    };
    const c = new OpenAI({ baseURL: gw.base, apiKey: 'placeholder', defaultHeaders: { 'X-API-Key': gw.key }, fetch: emptyAuth, maxRetries: 0 });
    expect((await c.models.list()).data).toHaveLength(8);
  });
});
