import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { holdFor as holdMoney, untilNothingHeld, books, reconciles } from '../harness/money.js';
import { startGateway, type TestGateway } from '../harness/gateway.js';
import { call, expectEnvelope, post } from '../harness/http.js';
import { sample } from '../harness/metrics.js';
import { until } from '../harness/until.js';

/**
 * Credit leases through real Envoy and Redis (billing.creditLease, on by default):
 * after a tenant's first request, its requests are admitted against credit this
 * instance set aside (committed inside the lease, settled out of it), the books
 * are exact, the customer's view of held credit leaves the lease out, and the
 * lease goes back when the tenant is idle. A cap set while a lease is open is
 * never exceeded; a deduct never takes what a request committed inside a lease
 * may still cost.
 */
let gw: TestGateway;

beforeAll(async () => {
  // The provider takes 4 s for the request a deduct meets in flight below: an idle timeout well above that.
  gw = await startGateway({ store: 'redis', billing: true, config: { upstream: { idleTimeoutMs: 30_000 }, billing: { creditCheck: true, creditLease: { enabled: true, requests: 16, headroom: 4, idleSeconds: 3 } } } });
});
afterAll(async () => {
  await gw?.stop();
});

const chat = (content: string) => ({ model: 'svc-quick', max_tokens: 50, messages: [{ role: 'user', content }] });

async function newTenant(credits: number) {
  const t = await gw.admin.createTenant('lease');
  const k = await gw.admin.createKey(t.id, {});
  await gw.admin.adjustCredits(t.id, credits, `grant-${t.id}`, 'test');
  return { tenant: t.id, key: k.key };
}

const metrics = async () => {
  const res = await fetch(`${gw.stack.adminUrl}/metrics`, { headers: { authorization: `Bearer ${gw.stack.adminToken}` } });
  return res.text();
};

describe('credit leases', () => {
  it('sequential chats: all but the first admitted from the lease, each booked once; the customer sees no lease in held; it goes back when idle', async () => {
    const { tenant, key } = await newTenant(1_000_000_000);
    const before = await metrics();
    const first = await post(`${gw.base}/chat/completions`, chat('one'), key);
    expect(first.status).toBe(200);
    const ids = [first.json.id as string];
    for (let i = 0; i < 20; i++) {
      const r = await post(`${gw.base}/chat/completions`, chat(`n${i}`), key);
      expect(r.status).toBe(200);
      ids.push(r.json.id as string);
    }
    const after = await metrics();
    const delta = (via: string) => sample(after, 'gateway_credit_admissions_total', { via }) - sample(before, 'gateway_credit_admissions_total', { via });
    expect(delta('direct')).toBe(1);
    expect(delta('lease')).toBe(20);
    // While the lease is open: set aside, but not shown to the customer as held.
    const a = await gw.admin.account(tenant);
    expect(a.leased).toBeGreaterThan(0);
    const credits = await call(`${gw.base}/credits`, { key });
    expect(credits.status).toBe(200);
    expect(credits.json.available).toBe(credits.json.balance - credits.json.held);
    expect(credits.json.available).toBeGreaterThan(a.balance - a.leased);
    // Idle: the lease goes back, and the books reconcile to the micro-unit.
    const b = await untilNothingHeld(gw.admin, tenant, 10_000);
    expect(reconciles(b)).toMatchObject({ ok: true });
    expect(new Set(b.usage.map((u) => u.requestId))).toEqual(new Set(ids));
    expect(sample(await metrics(), 'gateway_credit_leased_micro')).toBe(0);
  });

  it('a cap set while the lease is open: spend never above it; the refused get the gateway envelope (402/429/400), none reaches the provider', async () => {
    const { tenant, key } = await newTenant(1_000_000_000);
    for (let i = 0; i < 3; i++) expect((await post(`${gw.base}/chat/completions`, chat(`warm${i}`), key)).status).toBe(200);
    expect((await gw.admin.account(tenant)).leased).toBeGreaterThan(0);
    const body = chat('capped #sim:delay=800 #sim:tokens=5');
    const hold = holdMoney(gw.config, body);
    const spent = (await books(gw.admin, tenant)).charged;
    const cap = spent + 2 * hold + Math.floor(hold / 2);
    await gw.admin.setCap(tenant, cap);
    const seen = (await gw.sim('/_sim/stats')).requestsByPath['/v1/chat/completions'] ?? 0;
    const replies = await Promise.all(Array.from({ length: 8 }, () => post(`${gw.base}/chat/completions`, body, key)));
    const ok = replies.filter((r) => r.status === 200);
    expect(ok.length).toBeGreaterThan(0);
    expect(ok.length).toBeLessThanOrEqual(2);
    for (const r of replies.filter((x) => x.status !== 200)) {
      expect([400, 429]).toContain(r.status);
      expectEnvelope(r, r.status, r.status === 400 ? 'invalid_request' : 'spend_cap_exceeded');
    }
    expect(((await gw.sim('/_sim/stats')).requestsByPath['/v1/chat/completions'] ?? 0) - seen).toBe(ok.length);
    const b = await untilNothingHeld(gw.admin, tenant, 10_000);
    expect(reconciles(b)).toMatchObject({ ok: true });
    expect((await gw.admin.account(tenant)).spent).toBeLessThanOrEqual(cap);
  });
});

describe('a deduct while a lease is open', () => {
  it('the operator API recalls the lease, the deduct applies, and the request committed inside it is still paid for in full', async () => {
    const { tenant, key } = await newTenant(1_000_000_000);
    for (let i = 0; i < 3; i++) expect((await post(`${gw.base}/chat/completions`, chat(`warm${i}`), key)).status).toBe(200);
    const slow = chat('in flight #sim:delay=4000 #sim:tokens=5'); // still in flight while the deduct is made
    const providerChats = async (): Promise<number> => (await gw.sim('/_sim/stats')).requestsByPath['/v1/chat/completions'] ?? 0;
    // A request is committed inside the lease (no store call) only while the store confirmed the lease within
    // CONFIRMED_WITHIN_MS (500 ms; every settlement from it does); a stall longer than that since the last one
    // moves it out into a hold of its own instead. Then it is tried again, after a chat that confirms the lease.
    let inFlight!: ReturnType<typeof post>;
    let a!: Awaited<ReturnType<typeof gw.admin.account>>;
    for (let attempt = 1; attempt <= 5; attempt++) {
      if (attempt > 1) expect((await post(`${gw.base}/chat/completions`, chat(`again${attempt}`), key)).status).toBe(200);
      expect((await gw.admin.account(tenant)).leased).toBeGreaterThan(0);
      const seen = await providerChats();
      inFlight = post(`${gw.base}/chat/completions`, slow, key); // committed inside the lease
      await until('the request in flight at the provider', async () => (await providerChats()) > seen, 10_000);
      a = await gw.admin.account(tenant);
      if (a.held === 0) break;
      expect((await inFlight).status).toBe(200); // moved out of the lease: paid from its own hold
    }
    expect(a.held).toBe(0); // nothing but the lease: the request is committed inside it
    // Everything but what the request in flight may cost: only the lease stands in the way.
    const deduct = a.balance - holdMoney(gw.config, slow);
    const entry = await gw.admin.adjustCredits(tenant, -deduct, `deduct-${tenant}`, 'test');
    expect(entry).toMatchObject({ type: 'deduct', amount: -deduct, replayed: false });
    const after = await gw.admin.account(tenant);
    expect(after).toMatchObject({ leased: 0, held: holdMoney(gw.config, slow) }); // the lease went back; the request holds its own now
    expect((await inFlight).status).toBe(200);
    const b = await untilNothingHeld(gw.admin, tenant, 10_000);
    expect(reconciles(b)).toMatchObject({ ok: true });
    expect(b.balance).toBeGreaterThanOrEqual(0);
    expect(b.usage.some((u) => u.cost > 0 && u.cost <= holdMoney(gw.config, slow))).toBe(true);
    // More than is left: 409, nothing changes.
    await expect(gw.admin.adjustCredits(tenant, -(b.balance + 1), `deduct2-${tenant}`, 'test')).rejects.toThrow(/409|does not cover/);
  });
});

describe('credit leases across instances (two gateways on one Redis)', () => {
  let second: TestGateway;
  beforeAll(async () => {
    second = await startGateway({ store: 'redis', redisUrl: gw.redis!.url, billing: true, config: { billing: { creditCheck: true } } });
  }, 120_000);
  afterAll(async () => {
    await second?.stop();
  });

  it("a request that needs the credit another instance leases: that lease is recalled (Redis pub/sub) and the request is served", async () => {
    const small = chat('small');
    const big = { model: 'svc-quick', max_tokens: 4000, messages: [{ role: 'user', content: 'big' }] };
    const hold = holdMoney(gw.config, small);
    const bigHold = holdMoney(gw.config, big);
    const { tenant, key } = await newTenant(bigHold + 3 * hold);
    expect((await post(`${gw.base}/chat/completions`, small, key)).status).toBe(200);
    await until('the lease', async () => (await gw.admin.account(tenant)).leased > 0, 10_000).catch(() => {});
    const a = await gw.admin.account(tenant);
    expect(a.leased).toBeGreaterThan(0);
    expect(a.balance - a.held - a.leased).toBeLessThan(bigHold); // the lease is in the way
    const r = await post(`${second.base}/chat/completions`, big, key);
    expect(r.status).toBe(200);
    const b = await untilNothingHeld(gw.admin, tenant, 10_000);
    expect(reconciles(b)).toMatchObject({ ok: true });
  });
});

