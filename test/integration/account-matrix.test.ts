import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from '../harness/gateway.js';
import { call, expectEnvelope } from '../harness/http.js';

/**
 * Item 15: every account endpoint × every way of calling it, through real
 * Envoy and Redis, against the spec's authentication rules 2, 3, 8, 12 and
 * endpoint rule 11 and the account-service errors 1-3.
 *
 * Legend of the cells:
 *   200, 201  success
 *   A401      401 AUTH_001 (authentication_error): the key as a bearer, or an expired session with no key (auth rules 3, 9)
 *   S         403 AUTHZ_001 'session_required': a key on a session-only write (auth rule 12)
 *   O         403 AUTHZ_001 'owner_required': a member on an owner/admin write; with a key, the key's person (auth rule 12)
 *   NW        403 AUTHZ_001 'no_workspace': no workspace, or several and no X-Workspace-ID
 *
 * Columns:
 *   xkey     the owner's key in X-API-Key (a key acts as its person: the owner)
 *   bearer   the same key as Authorization: Bearer (no X-API-Key)
 *   owner, admin, member   sessions of people with that role in the workspace
 *   nows     a session of a person in no workspace
 *   multiH   a session of the owner listing two workspaces, with X-Workspace-ID naming this one
 *   multi    the same session without X-Workspace-ID
 *   expired  an expired session of the owner, no key
 *   garbage  a garbage bearer beside the owner's valid X-API-Key (falls through to the key, auth rule 3)
 */
type Cell = '200' | '201' | 'A401' | 'S' | 'O' | 'NW';
const COLUMNS = ['xkey', 'bearer', 'owner', 'admin', 'member', 'nows', 'multiH', 'multi', 'expired', 'garbage'] as const;
type Column = (typeof COLUMNS)[number];

//  method    path                              body                                  xkey    bearer  owner  admin  member nows  multiH multi expired garbage
const MATRIX: Array<[string, string, unknown, ...Cell[]]> = [
  ['GET',    '/accounts/me',                   undefined,                             '200', 'A401', '200', '200', '200', 'NW', '200', 'NW', 'A401', '200'],
  ['GET',    '/accounts/members',              undefined,                             '200', 'A401', '200', '200', '200', 'NW', '200', 'NW', 'A401', '200'],
  ['POST',   '/accounts/members',              { person_id: '{new}' },                'S',   'A401', '201', '201', 'O',   'NW', '201', 'NW', 'A401', 'S'],
  ['PATCH',  '/accounts/members/{victim}',     { role: 'admin' },                     'S',   'A401', '200', '200', 'O',   'NW', '200', 'NW', 'A401', 'S'],
  ['DELETE', '/accounts/members/{victim}',     undefined,                             'S',   'A401', '200', '200', 'O',   'NW', '200', 'NW', 'A401', 'S'],
  ['GET',    '/accounts/keys',                 undefined,                             '200', 'A401', '200', '200', '200', 'NW', '200', 'NW', 'A401', '200'],
  ['POST',   '/accounts/keys',                 { name: 'matrix' },                    'S',   'A401', '201', '201', '201', 'NW', '201', 'NW', 'A401', 'S'],
  ['DELETE', '/accounts/keys/{ownerkey}',      undefined,                             'S',   'A401', '200', '200', 'O',   'NW', '200', 'NW', 'A401', 'S'],
  ['GET',    '/credits',                       undefined,                             '200', 'A401', '200', '200', '200', 'NW', '200', 'NW', 'A401', '200'],
  ['GET',    '/credits/tiers',                 undefined,                             '200', 'A401', '200', '200', '200', 'NW', '200', 'NW', 'A401', '200'],
  ['GET',    '/credits/transactions',          undefined,                             '200', 'A401', '200', '200', '200', 'NW', '200', 'NW', 'A401', '200'],
  ['GET',    '/credits/spend-cap',             undefined,                             '200', 'A401', '200', '200', '200', 'NW', '200', 'NW', 'A401', '200'],
  ['PUT',    '/credits/spend-cap',             { spend_cap: null },                   '200', 'A401', '200', '200', 'O',   'NW', '200', 'NW', 'A401', '200'],
  ['POST',   '/credits/topup',                 { tier: 'tier_10' },                   '201', 'A401', '201', '201', 'O',   'NW', '201', 'NW', 'A401', '201'],
  ['POST',   '/credits/topup',                 { tier: 'tier_10', save_card: true, payment_method: '{card}' }, 'S', 'A401', '201', '201', 'O', 'NW', '201', 'NW', 'A401', 'S'],
  ['PUT',    '/credits/auto-topup',            { threshold: 1_000_000, tier: 'tier_10' }, 'S', 'A401', '200', '200', 'O',   'NW', '200', 'NW', 'A401', 'S'],
  ['DELETE', '/credits/auto-topup',            undefined,                             'S',   'A401', '200', '200', 'O',   'NW', '200', 'NW', 'A401', 'S'],
];

const TOKENS: Record<string, [number, string, string | null]> = {
  A401: [401, 'AUTH_001', null],
  S: [403, 'AUTHZ_001', 'session_required'],
  O: [403, 'AUTHZ_001', 'owner_required'],
  NW: [403, 'AUTHZ_001', 'no_workspace'],
};

let gw: TestGateway;
let ws: string;
let other: string;
const headers = {} as Record<Column, Record<string, string>>;
let n = 0;

beforeAll(async () => {
  gw = await startGateway({ store: 'redis', billing: true });
  ws = (await gw.admin.createTenant('matrix')).id;
  other = (await gw.admin.createTenant('matrix-other')).id;
  for (const [p, r] of [['usr_o', 'owner'], ['usr_a', 'admin'], ['usr_m', 'member']] as const) await gw.admin.setMember(ws, p, r);
  await gw.admin.setMember(other, 'usr_o', 'owner');
  const key = (await gw.admin.createKey(ws, { person_id: 'usr_o' })).key;
  const s = (user: string, workspaces: string[], issuedAt?: number) => gw.session({ userId: user, workspaces, ...(issuedAt ? { issuedAt } : {}) });
  const bearer = (t: string) => ({ authorization: `Bearer ${t}` });
  const multi = await s('usr_o', [ws, other]);
  Object.assign(headers, {
    xkey: { 'x-api-key': key },
    bearer: bearer(key),
    owner: bearer(await s('usr_o', [ws])),
    admin: bearer(await s('usr_a', [ws])),
    member: bearer(await s('usr_m', [ws])),
    nows: bearer(await s('usr_nobody', [])),
    multiH: { ...bearer(multi), 'x-workspace-id': ws },
    multi: bearer(multi),
    expired: bearer(await s('usr_o', [ws], Math.floor(Date.now() / 1000) - 7200)),
    garbage: { authorization: 'Bearer not.a.session', 'x-api-key': key },
  });
  // A saved card, so top-ups without a payment method and auto top-up can succeed.
  await saveCard();
}, 120_000);
afterAll(async () => {
  await gw?.stop();
});

async function cardToken(): Promise<string> {
  const r = await fetch(`${gw.paymentsUrl}/v1/tokens`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ number: '4242424242424242' }) });
  return ((await r.json()) as { id: string }).id;
}
async function saveCard(): Promise<void> {
  const r = await call(`${gw.base}/credits/topup`, { method: 'POST', headers: { ...headers.owner, 'content-type': 'application/json' }, body: JSON.stringify({ tier: 'tier_10', payment_method: await cardToken(), save_card: true }) });
  expect(r.status, r.text).toBe(201);
}

/** Placeholders: a fresh person, member or owner's key per cell, so destructive calls never depend on each other. */
async function fill(text: string): Promise<string> {
  n += 1;
  if (text.includes('{victim}')) await gw.admin.setMember(ws, `usr_victim_${n}`, 'member');
  const key = text.includes('{ownerkey}') ? (await gw.admin.createKey(ws, { person_id: 'usr_o' })).id : '';
  return text
    .replace('{new}', `usr_new_${n}`)
    .replace('{victim}', `usr_victim_${n}`)
    .replace('{ownerkey}', key)
    .replace('"{card}"', JSON.stringify(text.includes('{card}') ? await cardToken() : ''));
}

describe('account endpoints × credentials (item 15)', () => {
  for (const [method, path, body, ...cells] of MATRIX) {
    it(`${method} ${path}${body && JSON.stringify(body).includes('save_card') ? ' (save_card)' : ''}`, async () => {
      const got: string[] = [];
      const want: string[] = [];
      for (const [i, column] of COLUMNS.entries()) {
        const expected = cells[i] as Cell;
        const url = `${gw.base}${await fill(path)}`;
        const payload = body === undefined ? undefined : await fill(JSON.stringify(body));
        const r = await call(url, { method, headers: { ...headers[column], ...(payload ? { 'content-type': 'application/json' } : {}) }, body: payload });
        want.push(`${column}=${expected}`);
        if (expected === '200' || expected === '201') {
          got.push(`${column}=${r.status}`);
          continue;
        }
        const [status, code, token] = TOKENS[expected]!;
        expectEnvelope(r, status, code);
        const ok = token === null || r.json.error.message.includes(`'error': '${token}'`);
        got.push(`${column}=${ok ? expected : `${r.status} ${r.json.error.message}`}`);
      }
      expect(got).toEqual(want);
    });
  }
});
