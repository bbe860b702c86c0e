import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from '../harness/gateway.js';
import { call, expectEnvelope, post, type Reply } from '../harness/http.js';
import { logsCaughtUp } from '../harness/logs.js';
import { until } from '../harness/until.js';

/**
 * /v1/credits* through real Envoy and Redis with the bundled payment simulator:
 * reads and transaction pagination (item 6), top-ups (item 7), auto top-up
 * (item 8), the spend cap (item 9), the payment interface (item 10) and the
 * money tests of item 16. `bare` is billing on without a payment provider, on
 * the memory store (the account service inside the sidecar).
 */
let gw: TestGateway;
let bare: TestGateway;
let mem: TestGateway; // billing on, memory store (the account service inside the sidecar), payment simulator

beforeAll(async () => {
  [gw, bare, mem] = await Promise.all([
    startGateway({ store: 'redis', billing: true, config: { billing: { creditCheck: true } } }),
    startGateway({ billing: 'no-payments' }),
    startGateway({ billing: true, config: { accountService: { topupsPerMinute: 3 } } }),
  ]);
}, 180_000);
afterAll(async () => {
  await Promise.all([gw?.stop(), bare?.stop(), mem?.stop()]);
});

const CARDS = { ok: '4242424242424242', declined: '4000000000000002', transient: '4000000000000119' };
const bearer = (t: string) => ({ authorization: `Bearer ${t}` });

interface Ws {
  id: string;
  owner: string;
  admin: string;
  member: string;
  /** A key issued by the owner (acts as the owner). */
  ownerKey: string;
  memberKey: string;
}

async function workspace(g: TestGateway, credits = 0): Promise<Ws> {
  const t = await g.admin.createTenant('credits');
  for (const [p, r] of [['usr_o', 'owner'], ['usr_a', 'admin'], ['usr_m', 'member']] as const) await g.admin.setMember(t.id, p, r);
  if (credits) await g.admin.adjustCredits(t.id, credits, `open-${t.id}`, 'opening');
  const s = (p: string) => g.session({ userId: p, workspaces: [t.id] });
  return {
    id: t.id,
    owner: await s('usr_o'),
    admin: await s('usr_a'),
    member: await s('usr_m'),
    ownerKey: (await g.admin.createKey(t.id, { person_id: 'usr_o' })).key,
    memberKey: (await g.admin.createKey(t.id, { person_id: 'usr_m' })).key,
  };
}

const req = (g: TestGateway, method: string, path: string, auth: { token?: string; key?: string }, body?: unknown, headers: Record<string, string> = {}) =>
  call(`${g.base}${path}`, {
    method,
    key: auth.key,
    headers: { ...(auth.token ? bearer(auth.token) : {}), ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });

function expectToken(r: Reply, status: number, code: string, token: string): void {
  expectEnvelope(r, status, code);
  expect(r.json.error.message).toContain(`'error': '${token}'`);
}

async function cardToken(number: string, g: TestGateway = gw): Promise<string> {
  const r = await fetch(`${g.paymentsUrl}/v1/tokens`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ number }) });
  return ((await r.json()) as { id: string }).id;
}

async function charges(): Promise<Array<{ token: string; amount: number; status: string }>> {
  return ((await (await fetch(`${gw.paymentsUrl}/v1/charges`)).json()) as { data: Array<{ token: string; amount: number; status: string }> }).data;
}

async function allTransactions(g: TestGateway, auth: { key?: string; token?: string }, limit = 100) {
  const out: any[] = [];
  let cursor: string | null = null;
  do {
    const r: Reply = await req(g, 'GET', `/credits/transactions?limit=${limit}${cursor ? `&cursor=${cursor}` : ''}`, auth);
    expect(r.status, r.text).toBe(200);
    out.push(...r.json.data);
    cursor = r.json.next_cursor;
  } while (cursor);
  return out;
}

describe('reads (item 6)', () => {
  it('GET /credits: balance, held, available, currency, cap and period spend, auto top-up, card, for a key and a session', async () => {
    const ws = await workspace(gw, 5_000_000);
    for (const auth of [{ key: ws.memberKey }, { token: ws.member }]) {
      const r = await req(gw, 'GET', '/credits', auth);
      expect(r.status, r.text).toBe(200);
      expect(r.json).toMatchObject({
        object: 'credits',
        workspace_id: ws.id,
        currency: 'CHF',
        amounts_in: 'micro_units',
        balance: 5_000_000,
        held: 0,
        available: 5_000_000,
        spend_cap: null,
        auto_topup: { enabled: false, threshold: null, disabled_reason: null },
        card: null,
        topup_configured: true,
      });
      expect(r.json.period.spend).toBe(0);
    }
    const tiers = await req(gw, 'GET', '/credits/tiers', { key: ws.memberKey });
    expect(tiers.json.data.map((t: { id: string }) => t.id)).toEqual(['tier_10', 'tier_25', 'tier_50', 'tier_100']);
  });

  it('transactions: newest first, opaque cursors, a page size with a maximum, invalid_cursor', async () => {
    const ws = await workspace(gw);
    for (let i = 1; i <= 7; i++) await gw.admin.adjustCredits(ws.id, i * 1000, `g${i}`, `grant ${i}`);
    const first = await req(gw, 'GET', '/credits/transactions?limit=3', { key: ws.memberKey });
    expect(first.json.data.map((t: { amount: number }) => t.amount)).toEqual([7000, 6000, 5000]);
    expect(first.json.has_more).toBe(true);
    const all = await allTransactions(gw, { key: ws.memberKey }, 3);
    expect(all.map((t) => t.amount)).toEqual([7000, 6000, 5000, 4000, 3000, 2000, 1000]);
    expect(all[0]).toMatchObject({ object: 'transaction', type: 'grant', balance_after: 28000, description: 'grant 7' });
    const big = await req(gw, 'GET', '/credits/transactions?limit=100000', { key: ws.memberKey });
    expect(big.status).toBe(200); // capped at the maximum page size, not refused
    for (const bad of ['garbage', 'eyJ2IjoxLCJiZWZvcmUiOiJ4In0', Buffer.from('{"v":1,"before":"1-0; DROP"}').toString('base64url')]) {
      expectToken(await req(gw, 'GET', `/credits/transactions?cursor=${bad}`, { key: ws.memberKey }), 400, 'VAL_001', 'invalid_cursor');
    }
    const q = await req(gw, 'GET', '/credits/transactions?limit=0', { key: ws.memberKey });
    expect(q.status).toBe(422);
    expect(q.json.detail[0].loc).toEqual(['query', 'limit']);
  });
});

describe('top-ups (items 7, 10)', () => {
  it('a tier or an amount; unknown_credit_tier; amounts in whole cents within bounds; the balance rises at once (the next precheck sees it)', async () => {
    const ws = await workspace(gw);
    const token = await cardToken(CARDS.ok);
    const t = await req(gw, 'POST', '/credits/topup', { token: ws.owner }, { tier: 'tier_25', payment_method: token });
    expect(t.status, t.text).toBe(201);
    expect(t.json).toMatchObject({ object: 'topup', amount: 25_000_000, tier: 'tier_25', currency: 'CHF', balance: 25_000_000, card: { brand: 'visa', last4: '4242' }, card_saved: false });
    expect(JSON.stringify(t.json)).not.toContain(CARDS.ok);
    const a = await req(gw, 'POST', '/credits/topup', { key: ws.ownerKey }, { amount: 12_340_000, payment_method: token });
    expect(a.json.balance).toBe(37_340_000);
    expectToken(await req(gw, 'POST', '/credits/topup', { token: ws.owner }, { tier: 'tier_7', payment_method: token }), 400, 'VAL_001', 'unknown_credit_tier');
    expectToken(await req(gw, 'POST', '/credits/topup', { token: ws.owner }, { amount: 12_345_678, payment_method: token }), 400, 'VAL_001', 'invalid_amount');
    expect((await req(gw, 'POST', '/credits/topup', { token: ws.owner }, { tier: 'tier_10', amount: 10_000_000 })).status).toBe(422);
    expect((await req(gw, 'GET', '/credits', { token: ws.owner })).json.balance).toBe(37_340_000);
    const types = (await allTransactions(gw, { token: ws.owner })).map((x) => x.type);
    expect(types).toEqual(['topup', 'topup']);
  });

  it('owners and admins only (a key acts as its person); save_card takes a session; no card → no_card_on_file', async () => {
    const ws = await workspace(gw);
    const token = await cardToken(CARDS.ok);
    expectToken(await req(gw, 'POST', '/credits/topup', { token: ws.member }, { tier: 'tier_10', payment_method: token }), 403, 'AUTHZ_001', 'owner_required');
    expectToken(await req(gw, 'POST', '/credits/topup', { key: ws.memberKey }, { tier: 'tier_10', payment_method: token }), 403, 'AUTHZ_001', 'owner_required');
    expectToken(await req(gw, 'POST', '/credits/topup', { key: ws.ownerKey }, { tier: 'tier_10', payment_method: token, save_card: true }), 403, 'AUTHZ_001', 'session_required');
    expectToken(await req(gw, 'POST', '/credits/topup', { token: ws.admin }, { tier: 'tier_10' }), 409, 'RES_003', 'no_card_on_file');
    const saved = await req(gw, 'POST', '/credits/topup', { token: ws.admin }, { tier: 'tier_10', payment_method: token, save_card: true });
    expect(saved.json.card_saved).toBe(true);
    expect((await req(gw, 'GET', '/credits', { key: ws.memberKey })).json.card).toEqual({ brand: 'visa', last4: '4242' });
    // Now a plain top-up with a key charges the saved card.
    expect((await req(gw, 'POST', '/credits/topup', { key: ws.ownerKey }, { tier: 'tier_10' })).json.balance).toBe(20_000_000);
  });

  it('no payment provider → topup_not_configured', async () => {
    const ws = await workspace(bare);
    expectToken(await req(bare, 'POST', '/credits/topup', { token: ws.owner }, { tier: 'tier_10', payment_method: 'tok_x' }), 409, 'RES_003', 'topup_not_configured');
    expect((await req(bare, 'GET', '/credits', { token: ws.owner })).json.topup_configured).toBe(false);
  });

  it('Idempotency-Key: 50 concurrent resends credit once and all get the first result; another body with the key is a conflict', async () => {
    const ws = await workspace(gw);
    const token = await cardToken(CARDS.ok);
    const headers = { 'idempotency-key': `k-${ws.id}` };
    const body = { tier: 'tier_50', payment_method: token };
    const replies = await Promise.all(Array.from({ length: 50 }, () => req(gw, 'POST', '/credits/topup', { key: ws.ownerKey }, body, headers)));
    for (const r of replies) expect(r.status, r.text).toBe(201);
    expect(new Set(replies.map((r) => r.json.id)).size).toBe(1);
    expect(replies.filter((r) => r.headers.get('idempotent-replayed') === 'true')).toHaveLength(49);
    expect((await req(gw, 'GET', '/credits', { key: ws.ownerKey })).json.balance).toBe(50_000_000);
    expect((await charges()).filter((c) => c.token === token)).toHaveLength(1);
    expectToken(await req(gw, 'POST', '/credits/topup', { key: ws.ownerKey }, { tier: 'tier_10', payment_method: token }, headers), 409, 'RES_003', 'idempotency_key_reused');
  });

  it('a declined card changes nothing (402 card_declined, kept for its key); a transient failure is 503 and the retry with the same key credits once', async () => {
    const ws = await workspace(gw, 1_000_000);
    const declined = await cardToken(CARDS.declined);
    const d = await req(gw, 'POST', '/credits/topup', { token: ws.owner }, { tier: 'tier_10', payment_method: declined, save_card: true }, { 'idempotency-key': 'd1' });
    expectToken(d, 402, 'RES_003', 'card_declined');
    const again = await req(gw, 'POST', '/credits/topup', { token: ws.owner }, { tier: 'tier_10', payment_method: declined, save_card: true }, { 'idempotency-key': 'd1' });
    expectToken(again, 402, 'RES_003', 'card_declined');
    expect(again.json.error.request_id).not.toBe(d.json.error.request_id);
    const after = (await req(gw, 'GET', '/credits', { token: ws.owner })).json;
    expect(after).toMatchObject({ balance: 1_000_000, card: null });
    const flaky = await cardToken(CARDS.transient);
    const first = await req(gw, 'POST', '/credits/topup', { token: ws.owner }, { tier: 'tier_10', payment_method: flaky }, { 'idempotency-key': 't1' });
    expectToken(first, 503, 'SRV_001', 'payment_unavailable');
    expect(first.headers.get('retry-after')).toBeNull();
    const retry = await req(gw, 'POST', '/credits/topup', { token: ws.owner }, { tier: 'tier_10', payment_method: flaky }, { 'idempotency-key': 't1' });
    expect(retry.status, retry.text).toBe(201);
    expect(retry.json.balance).toBe(11_000_000);
  });
});

describe('auto top-up and the spend cap (items 8, 9)', () => {
  it('session only, owners and admins, a saved card, and an amount within the spend cap', async () => {
    const ws = await workspace(gw);
    const body = { threshold: 2_000_000, tier: 'tier_10' };
    expectToken(await req(gw, 'PUT', '/credits/auto-topup', { key: ws.ownerKey }, body), 403, 'AUTHZ_001', 'session_required');
    expectToken(await req(gw, 'DELETE', '/credits/auto-topup', { key: ws.ownerKey }), 403, 'AUTHZ_001', 'session_required');
    expectToken(await req(gw, 'PUT', '/credits/auto-topup', { token: ws.member }, body), 403, 'AUTHZ_001', 'owner_required');
    expectToken(await req(gw, 'PUT', '/credits/auto-topup', { token: ws.owner }, body), 409, 'RES_003', 'no_card_on_file');
    await req(gw, 'POST', '/credits/topup', { token: ws.owner }, { tier: 'tier_10', payment_method: await cardToken(CARDS.ok), save_card: true });
    expectToken(await req(gw, 'PUT', '/credits/spend-cap', { token: ws.member }, { spend_cap: 5_000_000 }), 403, 'AUTHZ_001', 'owner_required');
    const cap = await req(gw, 'PUT', '/credits/spend-cap', { key: ws.ownerKey }, { spend_cap: 5_000_000 });
    expect(cap.json).toMatchObject({ object: 'spend_cap', spend_cap: 5_000_000 });
    expect((await gw.admin.account(ws.id)).cap).toBe(5_000_000); // the same cap the operator CLI sets
    expectToken(await req(gw, 'PUT', '/credits/auto-topup', { token: ws.owner }, body), 409, 'RES_003', 'cap_below_amount');
    await req(gw, 'PUT', '/credits/spend-cap', { token: ws.admin }, { spend_cap: null });
    const on = await req(gw, 'PUT', '/credits/auto-topup', { token: ws.admin }, body);
    expect(on.json).toMatchObject({ object: 'auto_topup', enabled: true, threshold: 2_000_000, amount: 10_000_000, tier: 'tier_10' });
    expect((await req(gw, 'GET', '/credits', { key: ws.memberKey })).json.auto_topup.enabled).toBe(true);
    expect((await req(gw, 'DELETE', '/credits/auto-topup', { token: ws.owner })).json.enabled).toBe(false);
  });
});

const chatBody = (content = 'hello') => ({ model: 'svc-quick', max_tokens: 50, messages: [{ role: 'user', content }] });
const infer = (key: string, content?: string) => post(`${gw.base}/chat/completions`, chatBody(content), key);
/**
 * Until every settlement is written (settlements are written after the response): no hold open and no
 * credit lease left (a request admitted inside a lease holds nothing until it settles; an idle lease goes
 * back once none is left), and the ledger has stopped moving. An auto top-up may still be on its way.
 */
async function settled(ws: string): Promise<void> {
  let last = -1;
  await until('every settlement written', async () => {
    const a = await gw.admin.account(ws);
    const n = (await gw.admin.ledger(ws, 10_000)).data.length;
    const still = a.held === 0 && a.leased === 0 && n === last;
    last = n;
    if (!still) await new Promise((r) => setTimeout(r, 150));
    return still;
  }, 20_000);
}

describe('auto top-up fires (item 8) and the money tests (item 16)', () => {
  it('a top-up is visible to the very next 402 precheck', async () => {
    const ws = await workspace(gw);
    expectEnvelope(await infer(ws.ownerKey), 402, 'insufficient_credit');
    await req(gw, 'POST', '/credits/topup', { key: ws.ownerKey }, { tier: 'tier_10', payment_method: await cardToken(CARDS.ok) });
    expect((await infer(ws.ownerKey)).status).toBe(200);
  });

  it('50 settlements crossing the threshold at once fire exactly one auto top-up', async () => {
    const ws = await workspace(gw);
    const card = await cardToken(CARDS.ok);
    await req(gw, 'POST', '/credits/topup', { token: ws.owner }, { tier: 'tier_10', payment_method: card, save_card: true });
    const set = await req(gw, 'PUT', '/credits/auto-topup', { token: ws.owner }, { threshold: 10_000_000 - 100, tier: 'tier_25' });
    expect(set.status, set.text).toBe(200);
    const replies = await Promise.all(Array.from({ length: 50 }, () => infer(ws.memberKey)));
    for (const r of replies) expect(r.status, r.text).toBe(200);
    await settled(ws.id);
    // The auto top-up is charged at the payment provider after the settlement that crossed the threshold.
    await until('the auto top-up', async () => (await allTransactions(gw, { token: ws.owner })).some((t) => t.type === 'auto_topup'), 10_000).catch(() => {});
    await settled(ws.id);
    const tx = await allTransactions(gw, { token: ws.owner });
    expect(tx.filter((t) => t.type === 'charge')).toHaveLength(50);
    expect(tx.filter((t) => t.type === 'auto_topup')).toHaveLength(1);
    expect(tx.find((t) => t.type === 'auto_topup').amount).toBe(25_000_000);
    expect((await charges()).filter((c) => c.token === card)).toHaveLength(2); // the first top-up and one auto top-up
    const credits = (await req(gw, 'GET', '/credits', { token: ws.owner })).json;
    const spent = tx.filter((t) => t.type === 'charge').reduce((s, t) => s - t.amount, 0);
    expect(credits.balance).toBe(35_000_000 - spent);
    expect(credits.auto_topup).toMatchObject({ enabled: true, disabled_reason: null });
  }, 60_000);

  it('a declined card changes nothing but the auto top-up state: switched off, and the reads say why', async () => {
    const ws = await workspace(gw);
    const card = await cardToken(CARDS.ok);
    await req(gw, 'POST', '/credits/topup', { token: ws.owner }, { tier: 'tier_10', payment_method: card, save_card: true });
    await req(gw, 'PUT', '/credits/auto-topup', { token: ws.owner }, { threshold: 50_000_000, tier: 'tier_10' });
    await fetch(`${gw.paymentsUrl}/v1/tokens/${card}/behaviour`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ behaviour: 'decline' }) });
    expect((await infer(ws.ownerKey)).status).toBe(200);
    await settled(ws.id);
    await until('the auto top-up switched off', async () => (await req(gw, 'GET', '/credits', { token: ws.owner })).json.auto_topup.enabled === false, 10_000);
    const credits = (await req(gw, 'GET', '/credits', { token: ws.owner })).json;
    expect(credits.auto_topup).toMatchObject({ enabled: false, disabled_reason: 'card_declined', threshold: 50_000_000 });
    const tx = await allTransactions(gw, { token: ws.owner });
    expect(tx.map((t) => t.type)).toEqual(['charge', 'topup']);
    expect(credits.balance).toBe(10_000_000 + tx[0].amount);
    expect(credits.card).toEqual({ brand: 'visa', last4: '4242' });
  });

  it('opening balance + top-ups + grants − charges = closing balance, to the micro-unit, after a mixed run', async () => {
    const ws = await workspace(gw, 3_000_000);
    const card = await cardToken(CARDS.ok);
    const work: Array<Promise<unknown>> = [];
    for (let i = 0; i < 40; i++) {
      work.push(infer(i % 2 ? ws.ownerKey : ws.memberKey, `question ${i} ${'x'.repeat(i * 13)}`));
      if (i % 8 === 0) {
        work.push(req(gw, 'POST', '/credits/topup', { key: ws.ownerKey }, { amount: 5_230_000 + i * 10_000, payment_method: card }).then((r) => expect(r.status, r.text).toBe(201)));
      }
      if (i % 13 === 0) work.push(gw.admin.adjustCredits(ws.id, 777_777 + i, `mix-${i}`, 'grant'));
    }
    await Promise.all(work);
    await settled(ws.id);
    const tx = await allTransactions(gw, { token: ws.owner }, 7);
    const sum = (type: string) => tx.filter((t) => t.type === type).reduce((s, t) => s + t.amount, 0);
    const opening = 3_000_000;
    expect(tx.filter((t) => t.type === 'charge')).toHaveLength(40);
    expect(tx.filter((t) => t.type === 'topup')).toHaveLength(5);
    const closing = (await req(gw, 'GET', '/credits', { token: ws.owner })).json.balance;
    expect(opening + sum('topup') + (sum('grant') - opening) + sum('charge')).toBe(closing); // charges are negative amounts
    expect(tx[0].balance_after).toBe(closing);
    const usage = (await gw.admin.usageRecords(ws.id, 1000)).data.reduce((s, r) => s + r.cost, 0);
    expect(-sum('charge')).toBe(usage);
  }, 60_000);

  it('pagination returns every transaction exactly once while inference runs', async () => {
    const ws = await workspace(gw, 50_000_000);
    for (let i = 0; i < 25; i++) await gw.admin.adjustCredits(ws.id, 1000 + i, `p-${i}`, 'grant');
    const before = (await gw.admin.ledger(ws.id, 1000)).data.map((e) => e.id);
    let running = true;
    const traffic = (async () => {
      let n = 0;
      while (running && n < 200) {
        await Promise.all([infer(ws.memberKey), infer(ws.memberKey)]);
        n += 2;
      }
    })();
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const r: Reply = await req(gw, 'GET', `/credits/transactions?limit=3${cursor ? `&cursor=${cursor}` : ''}`, { key: ws.memberKey });
      seen.push(...r.json.data.map((t: { id: string }) => t.id));
      cursor = r.json.next_cursor;
      await new Promise((res) => setTimeout(res, 20)); // let settlements land between pages
    } while (cursor);
    running = false;
    await traffic;
    expect(new Set(seen).size).toBe(seen.length); // no duplicates
    for (const id of before) expect(seen.filter((s) => s === id)).toHaveLength(1); // no gaps
    // Inference really ran meanwhile (its settlements are written after the responses).
    let after: string[] = [];
    await until("the traffic's settlements", async () => (after = (await gw.admin.ledger(ws.id, 10_000)).data.map((e) => e.id)).length > before.length, 10_000).catch(() => {});
    expect(after.length).toBeGreaterThan(before.length);
    // Newest first throughout: the order of the ledger itself.
    expect(seen).toEqual(after.filter((id) => seen.includes(id)));
  }, 60_000);
});

describe('the embedded memory store (item 1)', () => {
  it('top-up attempts beyond accountService.topupsPerMinute are 429 RATE_001 with Retry-After; resends from an Idempotency-Key do not count', async () => {
    const ws = await workspace(mem);
    const card = await cardToken(CARDS.ok, mem);
    // Seven attempts: whatever minute boundary falls among them, at most 3 per window reach the provider.
    const replies: Reply[] = [];
    for (let i = 0; i < 7; i++) {
      replies.push(await req(mem, 'POST', '/credits/topup', { key: ws.ownerKey }, { tier: 'tier_10', payment_method: card }, { 'idempotency-key': `rl-${i}` }));
    }
    const ok = replies.filter((r) => r.status === 201);
    expect(ok.length).toBeGreaterThanOrEqual(3);
    expect(ok.length).toBeLessThanOrEqual(6);
    const limited = replies.find((r) => r.status === 429)!;
    expectToken(limited, 429, 'RATE_001', 'rate_limit_exceeded');
    expect(limited.json.error.type).toBe('rate_limit_error');
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    // A resend of a credited top-up is answered from its key, whatever the limit.
    const first = replies.indexOf(ok[0]!);
    const again = await req(mem, 'POST', '/credits/topup', { key: ws.ownerKey }, { tier: 'tier_10', payment_method: card }, { 'idempotency-key': `rl-${first}` });
    expect(again.status).toBe(201);
    expect(again.json.id).toBe(ok[0]!.json.id);
    expect((await req(mem, 'GET', '/credits', { key: ws.ownerKey })).json.balance).toBe(ok.length * 10_000_000);
  });

  it('top-up, saved card and auto top-up work the same with the account service inside the sidecar', async () => {
    const ws = await workspace(mem);
    const card = await cardToken(CARDS.ok, mem);
    const t = await req(mem, 'POST', '/credits/topup', { token: ws.owner }, { tier: 'tier_10', payment_method: card, save_card: true }, { 'idempotency-key': 'm1' });
    expect(t.status, t.text).toBe(201);
    expect((await req(mem, 'POST', '/credits/topup', { token: ws.owner }, { tier: 'tier_10', payment_method: card, save_card: true }, { 'idempotency-key': 'm1' })).json.id).toBe(t.json.id);
    expect((await req(mem, 'PUT', '/credits/auto-topup', { token: ws.owner }, { threshold: 10_000_000 - 1, tier: 'tier_25' })).status).toBe(200);
    const replies = await Promise.all(Array.from({ length: 10 }, () => post(`${mem.base}/chat/completions`, chatBody(), ws.memberKey)));
    for (const r of replies) expect(r.status).toBe(200);
    await until('the auto top-up', async () => (await allTransactions(mem, { token: ws.owner })).some((x) => x.type === 'auto_topup'), 10_000);
    await new Promise((r) => setTimeout(r, 300));
    const tx = await allTransactions(mem, { token: ws.owner });
    expect(tx.filter((x) => x.type === 'auto_topup')).toHaveLength(1);
    expect(tx.filter((x) => x.type === 'topup')).toHaveLength(1);
  }, 60_000);
});

describe('nothing secret in the logs', () => {
  it('no card number, card token or key in any process log line (account service, sidecar, payment simulator, Envoy)', async () => {
    const ws = await workspace(gw);
    const token = await cardToken(CARDS.ok);
    await req(gw, 'POST', '/credits/topup', { token: ws.owner }, { tier: 'tier_10', payment_method: token, save_card: true });
    const created = await req(gw, 'POST', '/accounts/keys', { token: ws.owner }, { name: 'log-check' });
    expect(created.status).toBe(201);
    await until('the top-up logged', () => gw.stack.processes.some((p) => p.lines.some((l) => l.includes('top-up credited'))), 10_000).catch(() => {});
    await logsCaughtUp(gw); // Envoy's and the sidecar's lines of the requests above
    const logs = gw.stack.processes.map((p) => p.lines.join('\n')).join('\n');
    expect(logs).toContain('top-up credited');
    for (const secret of [CARDS.ok, CARDS.declined, token, created.json.key, ws.ownerKey]) expect(logs).not.toContain(secret);
  });
});
