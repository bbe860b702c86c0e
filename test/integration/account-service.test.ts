import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, UUID, type TestGateway } from '../harness/gateway.js';
import { call, expectEnvelope, type Reply } from '../harness/http.js';
import { until } from '../harness/until.js';

/**
 * The account service through real Envoy: the service skeleton (item 1), billing
 * on/off (item 2), the account-service envelope and the request-body shapes
 * (items 11, 12), workspaces and people (items 3, 4) and keys issued by signed-in
 * people (item 5). Billing on runs on Redis (the account service as its own
 * process); billing off on the memory store (the account service inside the sidecar).
 */
let on: TestGateway; // billing on, Redis, payment simulator
let off: TestGateway; // billing off, memory store

beforeAll(async () => {
  [on, off] = await Promise.all([startGateway({ store: 'redis', billing: true }), startGateway({})]);
}, 120_000);
afterAll(async () => {
  await Promise.all([on?.stop(), off?.stop()]);
});

const bearer = (t: string) => ({ authorization: `Bearer ${t}` });
const send = (gw: TestGateway, method: string, path: string, opts: { key?: string; token?: string; body?: unknown; raw?: string; headers?: Record<string, string> } = {}) =>
  call(`${gw.base}${path}`, {
    method,
    key: opts.key,
    headers: { ...(opts.token ? bearer(opts.token) : {}), ...(opts.body !== undefined ? { 'content-type': 'application/json' } : {}), ...(opts.headers ?? {}) },
    body: opts.raw ?? (opts.body === undefined ? undefined : JSON.stringify(opts.body)),
  });

/** The account-service envelope with its machine token inside the message. */
export function expectToken(r: Reply, status: number, code: string, token: string, type?: string): void {
  expectEnvelope(r, status, code, type);
  expect(r.json.error.message).toContain(`'error': '${token}'`);
}

describe('billing off (item 2)', () => {
  it('every /credits* request, whatever its method and body, is the 404 "billing is not enabled"', async () => {
    const cases: Array<[string, string, Record<string, unknown>]> = [
      ['GET', '/credits', {}],
      ['GET', '/credits/transactions?cursor=garbage', {}],
      ['POST', '/credits/topup', { raw: '{not json', headers: { 'content-type': 'application/json' } }],
      ['POST', '/credits/topup', { raw: 'a=b', headers: { 'content-type': 'application/x-www-form-urlencoded' } }],
      ['PUT', '/credits/auto-topup', { body: { threshold: -1 } }],
      ['DELETE', '/credits/auto-topup', {}],
      ['PATCH', '/credits/nothing/here', { body: {} }],
      ['POST', '/credits/topup', { raw: 'x'.repeat(3 * 1024 * 1024), headers: { 'content-type': 'application/json' } }],
    ];
    for (const [method, path, opts] of cases) {
      const r = await send(off, method, path, { key: off.key, ...opts });
      expectEnvelope(r, 404, null, 'not_found_error');
      expect(r.json.error.message, `${method} ${path}`).toBe('Billing is not enabled on this deployment.');
    }
  });

  it('/accounts* still works', async () => {
    const me = await send(off, 'GET', '/accounts/me', { key: off.key });
    expect(me.status).toBe(200);
    expect(me.json).toMatchObject({ object: 'account', workspace_id: off.tenantId, auth_method: 'api_key' });
    expect((await send(off, 'GET', '/accounts/keys', { key: off.key })).status).toBe(200);
  });
});

describe('the account-service shape (items 2, 11, 12)', () => {
  it('an unknown path is a 404 RES_001; a known path with another method a 405 VAL_001', async () => {
    expectToken(await send(on, 'GET', '/credits/nothing', { key: on.key }), 404, 'RES_001', 'not_found', 'not_found_error');
    expectToken(await send(on, 'GET', '/accounts/nothing/here', { key: on.key }), 404, 'RES_001', 'not_found', 'not_found_error');
    expectToken(await send(off, 'GET', '/accounts/nothing', { key: off.key }), 404, 'RES_001', 'not_found');
    expectToken(await send(on, 'PUT', '/accounts/me', { key: on.key, body: {} }), 405, 'VAL_001', 'method_not_allowed');
  });

  it('malformed JSON is 400 VAL_001 invalid_json; a wrong content type 415; an over-size body 413: all in the envelope with the request id', async () => {
    const token = await on.session({ userId: 'usr_shape', workspaces: [`${on.tenantId}:owner`] });
    expectToken(await send(on, 'POST', '/accounts/keys', { token, raw: '{"name":', headers: { 'content-type': 'application/json' } }), 400, 'VAL_001', 'invalid_json');
    expectToken(await send(on, 'POST', '/accounts/keys', { token, raw: 'name=x', headers: { 'content-type': 'text/plain' } }), 415, 'VAL_001', 'unsupported_media_type');
    const big = await send(on, 'POST', '/accounts/keys', { token, raw: JSON.stringify({ name: 'x'.repeat(3 * 1024 * 1024) }), headers: { 'content-type': 'application/json' } });
    expectToken(big, 413, 'VAL_001', 'request_too_large');
  });

  it('a body that fails validation is the 422 detail array, one {loc, msg, type} per problem, never the value', async () => {
    const token = await on.session({ userId: 'usr_shape', workspaces: [`${on.tenantId}:owner`] });
    const r = await send(on, 'POST', '/accounts/keys', { token, body: { name: 7, scopes: ['admin'], allowed_ips: ['not-an-ip-secret'], extra: true } });
    expect(r.status, r.text).toBe(422);
    expect(Object.keys(r.json).sort()).toEqual(['detail', 'request_id']);
    expect(r.json.request_id).toMatch(UUID);
    expect(r.json.request_id).toBe(r.headers.get('x-request-id'));
    const locs = r.json.detail.map((d: { loc: unknown[] }) => d.loc.join('.'));
    expect(locs.sort()).toEqual(['body.allowed_ips.0', 'body.extra', 'body.name', 'body.scopes.0']);
    for (const d of r.json.detail) expect(Object.keys(d).sort()).toEqual(['loc', 'msg', 'type']);
    expect(r.text).not.toContain('not-an-ip-secret');
    expect(r.json.detail.find((d: { loc: string[] }) => d.loc[1] === 'extra').type).toBe('extra_forbidden');
    expect(r.json.detail.find((d: { loc: string[] }) => d.loc[1] === 'name').type).toBe('string_type');
  });
});

describe('workspaces and people (items 3, 4)', () => {
  /** A fresh workspace with an owner session. */
  async function workspace(gw: TestGateway) {
    const t = await gw.admin.createTenant('people');
    await gw.admin.setMember(t.id, 'usr_owner', 'owner');
    const owner = await gw.session({ userId: 'usr_owner', workspaces: [`${t.id}:owner`] });
    return { id: t.id, owner };
  }

  it('members are listed by anyone in the workspace; owners add, change and remove; the records decide the role', async () => {
    const ws = await workspace(on);
    expect((await send(on, 'POST', '/accounts/members', { token: ws.owner, body: { person_id: 'usr_admin', role: 'admin' } })).status).toBe(201);
    expect((await send(on, 'POST', '/accounts/members', { token: ws.owner, body: { person_id: 'usr_member' } })).json.role).toBe('member');
    expectToken(await send(on, 'POST', '/accounts/members', { token: ws.owner, body: { person_id: 'usr_member' } }), 409, 'RES_003', 'member_exists');
    // The session claims owner, the records say member: the records win.
    const member = await on.session({ userId: 'usr_member', workspaces: [`${ws.id}:owner`] });
    const me = await send(on, 'GET', '/accounts/me', { token: member });
    expect(me.json).toMatchObject({ workspace_id: ws.id, person_id: 'usr_member', role: 'member', auth_method: 'session' });
    const list = await send(on, 'GET', '/accounts/members', { token: member });
    expect(list.json.data.map((m: { person_id: string; role: string }) => `${m.person_id}:${m.role}`).sort()).toEqual(['usr_admin:admin', 'usr_member:member', 'usr_owner:owner']);
    expectToken(await send(on, 'POST', '/accounts/members', { token: member, body: { person_id: 'usr_x' } }), 403, 'AUTHZ_001', 'owner_required', 'permission_error');
    // An admin adds and changes members, but never touches the owner role.
    const admin = await on.session({ userId: 'usr_admin', workspaces: [`${ws.id}:admin`] });
    expect((await send(on, 'PATCH', '/accounts/members/usr_member', { token: admin, body: { role: 'admin' } })).json.role).toBe('admin');
    expectToken(await send(on, 'PATCH', '/accounts/members/usr_member', { token: admin, body: { role: 'owner' } }), 403, 'AUTHZ_001', 'owner_required');
    expectToken(await send(on, 'DELETE', '/accounts/members/usr_owner', { token: admin }), 403, 'AUTHZ_001', 'owner_required');
    expect((await send(on, 'GET', '/accounts/me', { token: member })).json.role).toBe('admin'); // at once, same session
    // Removal takes effect at once, even for a session still naming the workspace.
    expect((await send(on, 'DELETE', '/accounts/members/usr_member', { token: ws.owner })).status).toBe(200);
    expectToken(await send(on, 'GET', '/accounts/me', { token: member }), 403, 'AUTHZ_001', 'no_workspace');
    expectToken(await send(on, 'DELETE', '/accounts/members/usr_nobody', { token: ws.owner }), 404, 'RES_001', 'member_not_found', 'not_found_error');
    // A key cannot manage people.
    const key = (await on.admin.createKey(ws.id, { person_id: 'usr_owner' })).key;
    expectToken(await send(on, 'POST', '/accounts/members', { key, body: { person_id: 'usr_y' } }), 403, 'AUTHZ_001', 'session_required');
    expect((await send(on, 'GET', '/accounts/members', { key })).status).toBe(200);
  });

  it('a workspace always keeps an owner', async () => {
    const ws = await workspace(on);
    expectToken(await send(on, 'PATCH', '/accounts/members/usr_owner', { token: ws.owner, body: { role: 'admin' } }), 409, 'RES_003', 'last_owner');
    expectToken(await send(on, 'DELETE', '/accounts/members/usr_owner', { token: ws.owner }), 409, 'RES_003', 'last_owner');
    await send(on, 'POST', '/accounts/members', { token: ws.owner, body: { person_id: 'usr_second', role: 'owner' } });
    // Two owners demoting each other at the same moment: one wins, one owner remains.
    const second = await on.session({ userId: 'usr_second', workspaces: [`${ws.id}:owner`] });
    const [a, b] = await Promise.all([
      send(on, 'PATCH', '/accounts/members/usr_second', { token: ws.owner, body: { role: 'member' } }),
      send(on, 'PATCH', '/accounts/members/usr_owner', { token: second, body: { role: 'member' } }),
    ]);
    // The loser is refused either as the last owner (409, both checked at once) or, when the
    // winner's change landed before its own authorization, as no longer an owner (403).
    const [won, lost] = [a, b].sort((x, y) => x.status - y.status);
    expect(won?.status).toBe(200);
    expect([403, 409]).toContain(lost?.status);
    const owners = (await on.admin.listMembers(ws.id)).data.filter((m) => m.role === 'owner');
    expect(owners).toHaveLength(1);
  });

  it('X-Workspace-ID picks the workspace for a person in several; none, or one they are not in, is no_workspace', async () => {
    const [a, b] = [await workspace(on), await workspace(on)];
    const multi = await on.session({ userId: 'usr_owner', workspaces: [`${a.id}:owner`, `${b.id}:owner`] });
    expect((await send(on, 'GET', '/accounts/me', { token: multi, headers: { 'x-workspace-id': b.id } })).json.workspace_id).toBe(b.id);
    expectToken(await send(on, 'GET', '/accounts/me', { token: multi }), 403, 'AUTHZ_001', 'no_workspace');
    expectToken(await send(on, 'GET', '/accounts/me', { token: multi, headers: { 'x-workspace-id': 'ten_elsewhere' } }), 403, 'AUTHZ_001', 'no_workspace');
    const nowhere = await on.session({ userId: 'usr_lost', workspaces: [] });
    expectToken(await send(on, 'GET', '/accounts/me', { token: nowhere }), 403, 'AUTHZ_001', 'no_workspace');
  });
});

describe('keys issued by signed-in people (item 5)', () => {
  it('a session issues a key once (SHA-256 stored), lists it by prefix and last characters, and revokes it; every instance refuses it at once', async () => {
    const t = await on.admin.createTenant('keys');
    await on.admin.setMember(t.id, 'usr_k', 'member');
    const token = await on.session({ userId: 'usr_k', workspaces: [`${t.id}:member`] });
    // A second gateway instance on the same Redis: the revocation must reach its key cache too.
    const second = await startGateway({ store: 'redis', redisUrl: on.redis!.url, billing: true });
    try {
      const created = await send(on, 'POST', '/accounts/keys', { token, body: { name: 'ci', allowed_ips: ['127.0.0.1', '::1/128'] } });
      expect(created.status, created.text).toBe(201);
      const key: string = created.json.key;
      expect(key).toMatch(/^svc_pk_[A-Za-z0-9_-]{43}$/);
      expect(created.json).toMatchObject({ object: 'api_key', name: 'ci', scopes: ['ai'], allowed_ips: ['127.0.0.1', '::1/128'], status: 'active', person_id: 'usr_k' });
      const stored = await on.admin.listKeys(t.id);
      expect(JSON.stringify(stored)).not.toContain(key);
      // Both instances serve the key (and cache it).
      for (const gw of [on, second]) expect((await call(`${gw.base}/models`, { key })).status).toBe(200);
      const list = await send(on, 'GET', '/accounts/keys', { key });
      const view = list.json.data.find((k: { id: string }) => k.id === created.json.id);
      expect(view).toMatchObject({ display: `svc_pk_…${key.slice(-4)}`, last4: key.slice(-4), status: 'active' });
      expect(list.text).not.toContain(key);
      expect(list.text).not.toMatch(/[0-9a-f]{64}/);
      // A key cannot issue or revoke keys.
      expectToken(await send(on, 'POST', '/accounts/keys', { key, body: {} }), 403, 'AUTHZ_001', 'session_required');
      expectToken(await send(on, 'DELETE', `/accounts/keys/${created.json.id}`, { key }), 403, 'AUTHZ_001', 'session_required');
      const revoked = await send(on, 'DELETE', `/accounts/keys/${created.json.id}`, { token });
      expect(revoked.json.status).toBe('revoked');
      // Refused by both instances promptly: pub/sub drops the cached key (a cached key would
      // otherwise be served for auth.keyCacheSeconds, 30 s, far beyond this poll's 10 s).
      let refused = [0, 0];
      await until('both instances to refuse the revoked key', async () => {
        refused = await Promise.all([on, second].map(async (gw) => (await call(`${gw.base}/models`, { key })).status));
        return refused.every((s) => s === 401);
      }, 10_000).catch(() => {});
      expect(refused).toEqual([401, 401]);
    } finally {
      await second.stop();
    }
  }, 60_000);

  it('a member revokes only their own keys; owners and admins any key of the workspace; another workspace\'s key is not found', async () => {
    const t = await on.admin.createTenant('keys2');
    await on.admin.setMember(t.id, 'usr_o', 'owner');
    await on.admin.setMember(t.id, 'usr_m', 'member');
    const owner = await on.session({ userId: 'usr_o', workspaces: [`${t.id}:owner`] });
    const member = await on.session({ userId: 'usr_m', workspaces: [`${t.id}:member`] });
    const ownersKey = (await send(on, 'POST', '/accounts/keys', { token: owner, body: { name: 'o' } })).json;
    const membersKey = (await send(on, 'POST', '/accounts/keys', { token: member, body: { name: 'm' } })).json;
    expectToken(await send(on, 'DELETE', `/accounts/keys/${ownersKey.id}`, { token: member }), 403, 'AUTHZ_001', 'owner_required');
    expect((await send(on, 'DELETE', `/accounts/keys/${membersKey.id}`, { token: owner })).status).toBe(200);
    expectToken(await send(on, 'DELETE', `/accounts/keys/${on.tenantId === t.id ? 'x' : (await on.admin.listKeys(on.tenantId)).data[0]!.id}`, { token: owner }), 404, 'RES_001', 'key_not_found');
  });

  it('the operator CLI keeps issuing keys for bootstrapping (with an optional person)', async () => {
    const k = await on.admin.createKey(on.tenantId, { name: 'boot' });
    expect((await send(on, 'GET', '/accounts/me', { key: k.key })).json).toMatchObject({ auth_method: 'api_key', person_id: null, role: null });
  });
});

describe('operator CLI and the development identity provider (item 14)', () => {
  it('manages people, roles and tiers; mints sessions whose roles are recorded; drives the payment simulator', async () => {
    const { execFile } = await import('node:child_process');
    const { promisify } = await import('node:util');
    const { dirname } = await import('node:path');
    const run = (...args: string[]) =>
      promisify(execFile)(process.execPath, ['--import', 'tsx', 'sidecar/cli/main.ts', ...args, '--json'], {
        env: { ...process.env, ADMIN_URL: on.stack.adminUrl, ADMIN_TOKEN: on.stack.adminToken, DEV_IDP_DIR: dirname(on.config.identity.jwksFile!), PAYMENTS_URL: on.paymentsUrl! },
      }).then((r) => JSON.parse(r.stdout));
    const t = await on.admin.createTenant('cli');
    expect(await run('member', 'set', '--tenant', t.id, '--person', 'usr_cli', '--role', 'owner')).toMatchObject({ person_id: 'usr_cli', role: 'owner' });
    await expect(run('member', 'set', '--tenant', t.id, '--person', 'usr_cli', '--role', 'member')).rejects.toThrow(/owner/); // the last owner
    // A session for a person with roles in two workspaces; the roles are recorded.
    const u = await on.admin.createTenant('cli-2');
    const { token } = await run('session', 'mint', '--user', 'usr_two', '--workspace', `${t.id}:admin`, '--workspace', `${u.id}:member`);
    expect((await run('member', 'list', '--tenant', t.id)).map((m: { person_id: string; role: string }) => `${m.person_id}:${m.role}`).sort()).toEqual(['usr_cli:owner', 'usr_two:admin']);
    const me = await call(`${on.base}/accounts/me`, { headers: { authorization: `Bearer ${token}`, 'x-workspace-id': u.id } });
    expect(me.json).toMatchObject({ workspace_id: u.id, role: 'member' });
    // Tiers: replaced, then back to the configured ones.
    expect((await run('tier', 'set', '--tiers', 'small=5,big=250.5')).map((x: { id: string; amount: number }) => [x.id, x.amount])).toEqual([['small', 5_000_000], ['big', 250_500_000]]);
    expect((await send(on, 'GET', '/credits/tiers', { token, headers: { 'x-workspace-id': t.id } })).json.data.map((x: { id: string }) => x.id)).toEqual(['small', 'big']);
    expect((await run('tier', 'reset')).map((x: { id: string }) => x.id)).toEqual(['tier_10', 'tier_25', 'tier_50', 'tier_100']);
    // The payment simulator: a token, never the number.
    const card = await run('payments', 'token', '--card', '4000000000000002');
    expect(card).toMatchObject({ brand: 'visa', last4: '0002' });
    expect(JSON.stringify(card)).not.toContain('4000000000000002');
    expect(await run('payments', 'behaviour', '--token', card.id, '--set', 'succeed')).toMatchObject({ behaviour: 'succeed' });
    // Keys issued by the operator for a person act as that person.
    const k = await run('key', 'create', '--tenant', t.id, '--person', 'usr_cli');
    expect((await send(on, 'GET', '/accounts/me', { key: k.key })).json).toMatchObject({ person_id: 'usr_cli', role: 'owner' });
  }, 60_000);
});

describe('the OpenAPI document (item 13)', () => {
  it('is served by the gateway at /v1/openapi.json without credentials, and is the committed one', async () => {
    const { readFileSync } = await import('node:fs');
    const committed = JSON.parse(readFileSync('docs/openapi.json', 'utf8'));
    for (const gw of [on, off]) {
      const r = await call(`${gw.base}/openapi.json`);
      expect(r.status).toBe(200);
      expect(r.headers.get('content-type')).toMatch(/^application\/json/);
      expect(r.json).toEqual(committed);
    }
  });
});
