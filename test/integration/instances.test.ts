import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from '../harness/gateway.js';
import { call, expectEnvelope, post } from '../harness/http.js';
import { holdFor } from '../harness/money.js';

/** Two gateway instances (two sidecars, two Envoys) on one Redis: one set of keys, one balance. */
let a: TestGateway;
let b: TestGateway;

beforeAll(async () => {
  a = await startGateway({ store: 'redis', config: { billing: { creditCheck: true } } });
  b = await startGateway({ store: 'redis', redisUrl: a.redis!.url, config: { billing: { creditCheck: true } } });
});
afterAll(async () => {
  await b?.stop();
  await a?.stop();
});

const chat = (content: string) => ({ model: 'svc-quick', max_tokens: 50, messages: [{ role: 'user', content }] });

describe('several instances on one Redis', () => {
  it('a key issued on one instance works on the other; a revocation reaches both at once', async () => {
    const k = await a.admin.createKey(a.tenantId, {});
    expect((await call(`${b.base}/models`, { key: k.key })).status).toBe(200); // now cached on b
    expect((await call(`${a.base}/models`, { key: k.key })).status).toBe(200); // and on a
    await a.admin.revokeKey(k.id);
    // b learns of it through Redis pub/sub, well before its cache entry would expire (30 s).
    let status = 200;
    for (let i = 0; i < 40 && status === 200; i++) {
      status = (await call(`${b.base}/models`, { key: k.key })).status;
      if (status === 200) await new Promise((r) => setTimeout(r, 25));
    }
    expectEnvelope(await call(`${b.base}/models`, { key: k.key }), 401, 'invalid_api_key');
    expectEnvelope(await call(`${a.base}/models`, { key: k.key }), 401, 'invalid_api_key');
  });

  it('one balance: concurrent requests spread over both instances never overdraw it', async () => {
    const t = await a.admin.createTenant('shared');
    const k = await a.admin.createKey(t.id, {});
    const body = chat('shared #sim:delay=1500 #sim:tokens=3');
    await a.admin.adjustCredits(t.id, 6 * holdFor(a.config, body), 'six', 'covers six holds');

    const replies = await Promise.all(Array.from({ length: 60 }, (_, i) => post(`${(i % 2 ? a : b).base}/chat/completions`, body, k.key)));
    const ok = replies.filter((r) => r.status === 200);
    expect(ok.length).toBeLessThanOrEqual(6);
    expect(ok.length).toBeGreaterThan(0);
    expect(replies.filter((r) => r.status === 402)).toHaveLength(60 - ok.length);
    let after = await a.admin.account(t.id);
    for (let i = 0; i < 100 && after.held !== 0; i++) {
      await new Promise((r) => setTimeout(r, 100));
      after = await a.admin.account(t.id);
    }
    expect(after.held).toBe(0);
    expect(after.balance).toBeGreaterThanOrEqual(0);
    // Both instances read the same usage.
    const ua = await call(`${a.base}/usage`, { key: k.key });
    const ub = await call(`${b.base}/usage`, { key: k.key });
    expect([ua.status, ub.status]).toEqual([200, 200]);
    expect(typeof ua.json.balance).toBe('number');
    expect(ua.json.balance).toBe(after.balance);
    expect(ua.json.balance).toBe(ub.json.balance);
    expect(ua.json.totals.requests).toBe(ok.length);
  });
});
