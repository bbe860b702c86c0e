import { existsSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { holdFor as holdMoney } from '../harness/money.js';
import { listeningLine } from '../../sidecar/stack/process.js';
import { cliJson } from '../harness/cli.js';
import { startGateway, type TestGateway } from '../harness/gateway.js';
import { dumpRedis } from '../harness/redis.js';
import { call, expectEnvelope, post } from '../harness/http.js';
import { readSse } from '../harness/sse.js';
import { until } from '../harness/until.js';
import { CONFIRMED_WITHIN_MS } from '../../sidecar/src/domain/billing/credit-leases.js';
import { encodeFacts } from '../../sidecar/src/domain/billing/settlement-record.js';

/** Prepaid credits, holds, settlement, spend caps, throttling and usage, through real Envoy and Redis. */
let gw: TestGateway;
const TOP_UP = 'https://pay.example.test/top-up';

beforeAll(async () => {
  // The provider takes 4 s for some answers below (requests still in flight while the test looks at
  // their holds, even on a stalled box): an idle timeout well above that.
  gw = await startGateway({ store: 'redis', config: { upstream: { idleTimeoutMs: 30_000 }, billing: { creditCheck: true, topUpUrl: TOP_UP } } });
});
afterAll(async () => {
  await gw?.stop();
});

const chat = (content: string, extra: Record<string, unknown> = {}) => ({ model: 'svc-quick', max_tokens: 50, messages: [{ role: 'user', content }], ...extra });

const holdFor = (body: unknown): number => holdMoney(gw.config, body);

async function newTenant(credits: number) {
  const t = await gw.admin.createTenant('billing');
  const k = await gw.admin.createKey(t.id, {});
  if (credits > 0) await gw.admin.adjustCredits(t.id, credits, `grant-${t.id}`, 'test');
  return { tenant: t.id, key: k.key };
}

/** Waits until no hold is open (every settlement written). */
async function settled(tenant: string, timeoutMs = 15_000) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const a = await gw.admin.account(tenant);
    if (a.held === 0) return a;
    if (Date.now() > until) throw new Error(`holds still open: ${JSON.stringify(a)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** What the tenant has on hold once the first hold appears (a request in flight). */
async function firstHold(tenant: string): Promise<number> {
  let held = 0;
  await until('a hold', async () => (held = (await gw.admin.account(tenant)).held) > 0, 10_000);
  return held;
}

const simRequests = async () => (await gw.sim('/_sim/stats')).requestsByPath['/v1/chat/completions'] ?? 0;

async function providerHasSeen(n: number, timeoutMs = 10_000) {
  const until = Date.now() + timeoutMs;
  while ((await simRequests()) < n) {
    if (Date.now() > until) throw new Error(`the provider saw fewer than ${n} requests`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function ledgerCharges(tenant: string) {
  const { data } = await gw.admin.ledger(tenant, 10_000);
  return data.filter((e) => e.type === 'charge').reduce((s, e) => s - e.amount, 0);
}

async function usageCosts(tenant: string) {
  const { data } = await gw.admin.usageRecords(tenant, 10_000);
  return { records: data, total: data.reduce((s, r) => s + r.cost, 0) };
}

describe('the credit check (402) and holds', () => {
  it('a deduction never takes what a request in flight holds (409, nothing changes); the request is paid in full', async () => {
    const body = chat('slow answer #sim:delay=4000 #sim:tokens=5');
    const hold = holdFor(body);
    const { tenant, key } = await newTenant(3 * hold);
    const answer = post(`${gw.base}/chat/completions`, body, key);
    expect(await firstHold(tenant)).toBe(hold);
    // Two holds' worth is free; taking one micro-unit more would leave the request's hold uncovered.
    const refused = await gw.admin.adjustCredits(tenant, -(2 * hold + 1), 'deduct-too-much', 'test').catch((err: unknown) => err);
    expect(refused).toMatchObject({ status: 409 });
    expect(String((refused as Error).message)).toContain('open requests hold');
    expect(await gw.admin.account(tenant)).toMatchObject({ balance: 3 * hold, held: hold });
    // The same key is still unused: the deduction that fits applies under it.
    expect(await gw.admin.adjustCredits(tenant, -2 * hold, 'deduct-too-much', 'test')).toMatchObject({ type: 'deduct', balanceAfter: hold });
    const res = await answer;
    expect(res.status).toBe(200);
    const account = await settled(tenant);
    const charged = await ledgerCharges(tenant);
    expect(charged).toBeGreaterThan(0);
    expect(charged).toBeLessThanOrEqual(hold);
    expect(account.balance).toBe(hold - charged);
    expect(account.balance).toBeGreaterThanOrEqual(0);
  });

  it('200 concurrent requests against a balance that covers 10: at most 10 reach the provider, never below zero, every micro-unit accounted for', async () => {
    const body = chat('slow answer #sim:delay=4000 #sim:tokens=5'); // all 200 are judged while the first holds are open
    const hold = holdFor(body);
    const opening = 10 * hold + Math.floor(hold / 2);
    const { tenant, key } = await newTenant(opening);
    const before = await simRequests();

    const replies = await Promise.all(Array.from({ length: 200 }, () => post(`${gw.base}/chat/completions`, body, key)));
    const ok = replies.filter((r) => r.status === 200);
    const refused = replies.filter((r) => r.status === 402);
    expect(ok.length + refused.length).toBe(200);
    expect(ok.length).toBeLessThanOrEqual(10);
    expect(ok.length).toBeGreaterThan(0);
    expect((await simRequests()) - before).toBe(ok.length);
    for (const r of refused.slice(0, 3)) {
      expectEnvelope(r, 402, 'insufficient_credit', 'insufficient_quota');
      expect(r.json.error.message).toContain(TOP_UP);
      expect(r.json.error.message).not.toMatch(new RegExp(`\\b${opening}\\b`)); // no balance in the envelope
    }

    const closing = await settled(tenant);
    expect(closing.balance).toBeGreaterThanOrEqual(0);
    const charges = await ledgerCharges(tenant);
    const usage = await usageCosts(tenant);
    expect(opening - closing.balance).toBe(charges);
    expect(usage.total).toBe(charges);
    expect(usage.records).toHaveLength(ok.length);
    expect(new Set(usage.records.map((r) => r.requestId))).toEqual(new Set(ok.map((r) => r.json.id)));
  });

  it('the hold is the worst case worked out by hand, not by the code under test', async () => {
    // svc-quick → sim-quick-1 at 100,000 / 400,000 micro-units per million tokens (in/out).
    // Prompt bound: JSON of the messages, [{"role":"user","content":"x #sim:delay=4000"}] = 47 bytes,
    // + 8 per message + 16 = 71 tokens; completion bound: max_tokens 50.
    // ceil((71 × 100,000 + 50 × 400,000) / 1,000,000) = ceil(27.1) = 28 micro-units.
    const body = chat('x #sim:delay=4000');
    expect(JSON.stringify(body.messages).length).toBe(47);
    expect(holdFor(body)).toBe(28); // the tests' oracle agrees with the hand calculation
    const { tenant, key } = await newTenant(1_000_000);
    const inFlight = post(`${gw.base}/chat/completions`, body, key);
    expect(await firstHold(tenant)).toBe(28); // and so does the gateway, through Envoy
    expect((await inFlight).status).toBe(200);
  });

  it('max_tokens and max_completion_tokens together: the hold covers max_completion_tokens (hand-worked)', async () => {
    // As above, with completion bounded by max_completion_tokens 500 (max_tokens 50 is not what counts):
    // ceil((71 × 100,000 + 500 × 400,000) / 1,000,000) = ceil(207.1) = 208 micro-units.
    const body = chat('x #sim:delay=4000', { max_completion_tokens: 500 });
    expect(body.max_tokens).toBe(50);
    expect(holdFor(body)).toBe(208);
    const { tenant, key } = await newTenant(1_000_000);
    const inFlight = post(`${gw.base}/chat/completions`, body, key);
    expect(await firstHold(tenant)).toBe(208);
    expect((await inFlight).status).toBe(200);
  });

  it('a refused request costs nothing; an empty balance refuses before the provider', async () => {
    const { tenant, key } = await newTenant(0);
    const before = await simRequests();
    expectEnvelope(await post(`${gw.base}/chat/completions`, chat('hi'), key), 402, 'insufficient_credit');
    expect(await simRequests()).toBe(before);
    expect((await gw.admin.account(tenant)).balance).toBe(0);
    expect((await gw.admin.ledger(tenant)).data).toHaveLength(0);
  });

  it('a provider failure releases the hold: nothing is charged', async () => {
    const { tenant, key } = await newTenant(1_000_000);
    expectEnvelope(await post(`${gw.base}/chat/completions`, chat('x #sim:status=500'), key), 502, 'upstream_error');
    const a = await settled(tenant);
    expect(a.balance).toBe(1_000_000);
    expect((await usageCosts(tenant)).records).toHaveLength(0);
  });

  it('a stream that fails before its first event (a clean 502), or whose client leaves during the first token, costs nothing', async () => {
    const { tenant, key } = await newTenant(1_000_000);
    for (const directive of ['#sim:midstream-error', '#sim:midstream-error-event', '#sim:midstream-end']) {
      const r = await post(`${gw.base}/chat/completions`, chat(`x ${directive} #sim:fail-after=0`, { stream: true }), key);
      expectEnvelope(r, 502, 'upstream_error');
    }
    // The first token comes after 5 s: the client (gone after 0.3 s) gets none, however late its timer fires.
    const left = await readSse(`${gw.base}/chat/completions`, chat('x #sim:prefill=5000', { stream: true }), key, { abortAfterMs: 300 });
    expect(left.events).toHaveLength(0);
    const a = await settled(tenant);
    expect(a).toMatchObject({ balance: 1_000_000, held: 0 });
    expect((await usageCosts(tenant)).records).toHaveLength(0);
  });
});

describe('spend caps (429)', () => {
  it('200 concurrent requests against a cap that covers 10: at most 10 served, spend never above the cap', async () => {
    const body = chat('capped #sim:delay=4000 #sim:tokens=5');
    const hold = holdFor(body);
    const { tenant, key } = await newTenant(1_000_000_000);
    const cap = 10 * hold + Math.floor(hold / 2);
    await gw.admin.setCap(tenant, cap);
    const before = await simRequests();
    const replies = await Promise.all(Array.from({ length: 200 }, () => post(`${gw.base}/chat/completions`, body, key)));
    const ok = replies.filter((r) => r.status === 200);
    // Half a hold is left once ten are held: a 400 saying what is left and which max_tokens
    // would be served (spend_cap_exceeded only once nothing is left; see edge.test.ts).
    const capped = replies.filter((r) => r.status === 400);
    expect(ok.length + capped.length).toBe(200);
    expect(ok.length).toBeLessThanOrEqual(10);
    expect(ok.length).toBeGreaterThan(0); // the cap covers ten: refusing everything is not passing
    expect((await simRequests()) - before).toBe(ok.length);
    expectEnvelope(capped[0]!, 400, 'invalid_request');
    expect(capped[0]!.json.error.param).toBe('max_tokens');
    expect(capped[0]!.headers.get('retry-after')).toBeNull();
    const a = await settled(tenant);
    expect(a.spent).toBeLessThanOrEqual(cap);
    expect(1_000_000_000 - a.balance).toBe(await ledgerCharges(tenant));
    expect(a.spent).toBe(await ledgerCharges(tenant));
  });
});

describe('metering', () => {
  it('a stream abandoned mid-way is charged for what was generated (estimated)', async () => {
    const { tenant, key } = await newTenant(1_000_000);
    const r = await readSse(`${gw.base}/chat/completions`, chat('long #sim:tokens=40 #sim:chunk-delay=80', { stream: true }), key, { abortAfterEvents: 5 });
    const rid = r.headers.get('x-request-id');
    await settled(tenant);
    const { records } = await usageCosts(tenant);
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({ requestId: rid, alias: 'svc-quick', estimated: true });
    expect(records[0]!.completionTokens).toBeGreaterThan(0);
    expect(records[0]!.completionTokens).toBeLessThan(40);
    expect(records[0]!.cost).toBeGreaterThan(0);
  });

  it('svc-deep: hidden reasoning tokens are billed as completion tokens', async () => {
    const { tenant, key } = await newTenant(10_000_000);
    const r = await post(`${gw.base}/chat/completions`, { model: 'svc-deep', messages: [{ role: 'user', content: 'think #sim:reasoning=7 #sim:tokens=2' }] }, key);
    expect(r.status).toBe(200);
    expect(r.json.choices[0].message.reasoning_content).toBeUndefined();
    expect(r.json.usage.completion_tokens).toBe(9);
    await settled(tenant);
    const { records } = await usageCosts(tenant);
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({ requestId: r.headers.get('x-request-id'), alias: 'svc-deep', completionTokens: 9, estimated: false });
  });

  it('svc-deep without provider usage: the hidden reasoning is counted and billed, streamed or not (rule 6)', async () => {
    const { tenant, key } = await newTenant(10_000_000);
    const body = { model: 'svc-deep', messages: [{ role: 'user', content: 'think #sim:no-usage #sim:reasoning=7 #sim:tokens=2' }] };
    // Reasoning "Let me think about this request step" (36 characters), answer "The simulated" (13).
    const whole = await post(`${gw.base}/chat/completions`, body, key);
    expect(whole.status).toBe(200);
    expect(whole.json.choices[0].message).toEqual({ role: 'assistant', content: 'The simulated' });
    // The message counted as returned ('assistant' + the answer, 22) plus the reasoning (36): 58 characters → 15 tokens.
    expect(whole.json.usage.completion_tokens).toBe(15);
    const streamed = await readSse(`${gw.base}/chat/completions`, { ...body, stream: true }, key);
    // The deltas' text (36 + 13 = 49 characters) → 13 tokens.
    expect(streamed.events.at(-1)).toBe('[DONE]');
    expect(JSON.parse(streamed.events.at(-2)!).usage.completion_tokens).toBe(13);
    await settled(tenant);
    const { records } = await usageCosts(tenant);
    const byId = new Map(records.map((r) => [r.requestId, r]));
    expect(byId.get(whole.headers.get('x-request-id')!)).toMatchObject({ alias: 'svc-deep', completionTokens: 15, estimated: true });
    expect(byId.get(streamed.headers.get('x-request-id')!)).toMatchObject({ alias: 'svc-deep', completionTokens: 13, estimated: true });
  });

  it('a stream whose provider sent no usage is charged from counted tokens, marked estimated', async () => {
    const { tenant, key } = await newTenant(1_000_000);
    const r = await readSse(`${gw.base}/chat/completions`, chat('x #sim:no-usage #sim:tokens=6', { stream: true }), key);
    expect(r.events[r.events.length - 1]).toBe('[DONE]');
    await settled(tenant);
    const { records } = await usageCosts(tenant);
    expect(records[0]).toMatchObject({ estimated: true });
    expect(records[0]!.completionTokens).toBeGreaterThan(0);
  });

  it('usage records carry every field and no content; embeddings count one request per input', async () => {
    const { tenant, key } = await newTenant(1_000_000);
    const secret = 'CONTENT-MARKER-42';
    const c = await post(`${gw.base}/chat/completions`, chat(`${secret} #sim:tokens=3`), key);
    const e = await post(`${gw.base}/embeddings`, { model: 'svc-embed', input: [secret, 'b', 'c'] }, key);
    expect(c.status).toBe(200);
    expect(e.status).toBe(200);
    await settled(tenant);
    const { records } = await usageCosts(tenant);
    const chatRec = records.find((r) => r.requestId === c.json.id)!;
    expect(Object.keys(chatRec).sort()).toEqual(
      ['alias', 'completionTokens', 'cost', 'estimated', 'internalModel', 'keyId', 'promptTokens', 'requestCount', 'requestId', 'tenantId', 'time', 'totalTokens'].sort(),
    );
    expect(chatRec).toMatchObject({ alias: 'svc-quick', internalModel: 'sim-quick-1', tenantId: tenant, requestCount: 1, completionTokens: 3, estimated: false });
    const embRec = records.find((r) => r.requestId === e.json.svc.request_id)!;
    expect(embRec).toMatchObject({ alias: 'svc-embed', requestCount: 3, cost: 60 });
    expect(JSON.stringify(records)).not.toContain(secret);
    // Nowhere in the store: neither the prompt nor the completion text.
    const answer = c.json.choices[0].message.content as string;
    expect(answer.length).toBeGreaterThan(10);
    const dump = await dumpRedis(gw.redis!.url);
    expect(dump).not.toContain(secret);
    expect(dump).not.toContain(answer);
  });
});

describe('the store goes away (fails closed; nothing lost)', () => {
  it('Redis paused mid-load → 503 credits_unavailable and no provider call (once the credit lease went unconfirmed); afterwards every completed request is in the usage counter', async () => {
    const { tenant, key } = await newTenant(100_000_000);
    const body = chat('steady #sim:delay=1500 #sim:tokens=2');
    await post(`${gw.base}/chat/completions`, chat('warm'), key); // the key is now in the cache
    await settled(tenant);
    const before = await simRequests();

    const inFlight = Array.from({ length: 8 }, () => post(`${gw.base}/chat/completions`, body, key));
    await providerHasSeen(before + 8); // admitted and held, waiting on the provider
    await gw.redis!.pause();
    // A lease admits by commitment only while the store confirmed it within CONFIRMED_WITHIN_MS (its credit is
    // held in the store all along); past that, admission asks the store, which does not answer.
    await new Promise((r) => setTimeout(r, CONFIRMED_WITHIN_MS + 100));
    const duringOutage = await Promise.all(Array.from({ length: 8 }, () => post(`${gw.base}/chat/completions`, body, key)));
    const completed = await Promise.all(inFlight); // their settlements fail now and are journaled
    const providerCalls = (await simRequests()) - before;
    await gw.redis!.resume();

    for (const r of duringOutage) {
      expectEnvelope(r, 503, 'credits_unavailable');
      expect(r.headers.get('retry-after')).toBeNull(); // only the identity 503 carries it
    }
    const ok = completed.filter((r) => r.status === 200);
    expect(ok).toHaveLength(8);
    expect(providerCalls).toBe(8);

    const a = await settled(tenant, 20_000);
    const { records } = await usageCosts(tenant);
    const ids = new Set(records.map((r) => r.requestId));
    for (const r of ok) expect(ids.has(r.json.id)).toBe(true);
    expect(100_000_000 - a.balance).toBe(await ledgerCharges(tenant));
  });

  it('a settlement journaled while the store was down survives a sidecar restart', async () => {
    const { tenant, key } = await newTenant(100_000_000);
    await post(`${gw.base}/chat/completions`, chat('warm'), key);
    await settled(tenant);
    const seen = await simRequests();
    const pending = post(`${gw.base}/chat/completions`, chat('x #sim:delay=1000'), key);
    await providerHasSeen(seen + 1);
    await gw.redis!.pause();
    const done = await pending;
    expect(done.status).toBe(200);
    await new Promise((r) => setTimeout(r, 1500)); // the settle times out and is journaled
    const sidecar = gw.stack.process('sidecar');
    sidecar.signal('SIGKILL');
    await gw.redis!.resume();
    await sidecar.restart();
    await sidecar.waitForLine(listeningLine, 20_000);
    await settled(tenant, 20_000);
    const { records } = await usageCosts(tenant);
    expect(records.map((r) => r.requestId)).toContain(done.json.id);
  });

  it('a settlement a killed sidecar had recorded but not yet written is applied, once, when it starts again', async () => {
    const { tenant, key } = await newTenant(100_000_000);
    expect((await post(`${gw.base}/chat/completions`, chat('warm'), key)).status).toBe(200);
    const before = await settled(tenant);
    const sidecar = gw.stack.process('sidecar');
    sidecar.signal('SIGKILL');
    await sidecar.exitedNow();
    // What a sidecar killed between an answer and its store write leaves on disk: the
    // settlement's record, in the file next to its journal (Billing.finish).
    const now = Date.now();
    const requestId = 'req-recorded-before-a-crash';
    // 3 prompt and 2 completion tokens at 100,000 and 500,000 per million, and 1,000 a request: 1,001.3 → 1,002.
    const facts = {
      requestId, tenantId: tenant, keyId: null, startedAt: now, now, alias: 'svc-quick', internalModel: 'quick-model',
      promptTokens: 3, completionTokens: 2, totalTokens: 5, estimated: false, requestCount: 1,
      price: { inputPerMillion: 100_000, outputPerMillion: 500_000, perInput: 1000 }, creditCheck: true, lease: null,
    };
    const recorded = `${gw.config.billing.journalPath}.intents.4`;
    writeFileSync(recorded, `${encodeFacts(facts)}\n{"torn":`);
    await sidecar.restart();
    await sidecar.waitForLine(listeningLine, 20_000);
    expect(sidecar.lines.some((l) => l.includes('settlements the previous run recorded and may not have written'))).toBe(true);
    let records: { requestId: string; cost: number }[] = [];
    for (let i = 0; i < 100 && !records.some((r) => r.requestId === requestId); i++) {
      await new Promise((r) => setTimeout(r, 100));
      records = (await usageCosts(tenant)).records;
    }
    expect(records.filter((r) => r.requestId === requestId).map((r) => r.cost)).toEqual([1002]);
    expect(existsSync(recorded)).toBe(false);
    // Applied once: a second start finds nothing to apply and the balance moved by the charge alone.
    sidecar.signal('SIGKILL');
    await sidecar.exitedNow();
    await sidecar.restart();
    await sidecar.waitForLine(listeningLine, 20_000);
    expect((await usageCosts(tenant)).records.filter((r) => r.requestId === requestId)).toHaveLength(1);
    expect((await gw.admin.account(tenant)).balance).toBe(before.balance - 1002);
  });
});

describe('a crashed sidecar', () => {
  it('leaves a hold that expires and is released: nothing is charged', async () => {
    // A hold lives 5 s at most; the provider takes longer than that (the hold is there to be seen, even on a stalled box).
    const short = await startGateway({ store: 'redis', config: { upstream: { idleTimeoutMs: 30_000 }, billing: { creditCheck: true, holdTtlSeconds: 5 } } });
    try {
      await short.admin.adjustCredits(short.tenantId, 1_000_000, 'g', 'test');
      const pending = post(`${short.base}/chat/completions`, chat('x #sim:delay=10000'), short.key).catch(() => null);
      let held = 0;
      await until('the hold', async () => (held = (await short.admin.account(short.tenantId)).held) > 0, 10_000);
      expect(held).toBeGreaterThan(0); // the hold is placed, the provider is working
      const sidecar = short.stack.process('sidecar');
      sidecar.signal('SIGKILL'); // no settlement will ever come from this process
      await pending;
      await sidecar.restart();
      await sidecar.waitForLine(listeningLine, 20_000);
      let a = await short.admin.account(short.tenantId);
      await until('the hold released', async () => (a = await short.admin.account(short.tenantId)).held === 0, 20_000).catch(() => {});
      expect(a).toMatchObject({ held: 0, balance: 1_000_000, spent: 0 });
    } finally {
      await short.stop();
    }
  }, 90_000);
});

describe('credit check off', () => {
  it('requests are served with no balance and still metered', async () => {
    const off = await startGateway({ store: 'redis', config: { billing: { creditCheck: false } } });
    try {
      const t = await off.admin.createTenant('postpaid');
      const k = await off.admin.createKey(t.id, {});
      const r = await post(`${off.base}/chat/completions`, chat('hi #sim:tokens=4'), k.key);
      expect(r.status).toBe(200);
      let records: Array<{ cost: number }> = [];
      for (let i = 0; i < 50 && !records.length; i++) {
        records = (await off.admin.usageRecords(t.id)).data;
        if (!records.length) await new Promise((res) => setTimeout(res, 100));
      }
      expect(records).toHaveLength(1);
      expect(records[0]!.cost).toBeGreaterThan(0);
      expect((await off.admin.account(t.id)).balance).toBe(-records[0]!.cost);
    } finally {
      await off.stop();
    }
  });
});

describe('throttling (429 rate_limit_exceeded, distinct from the spend cap)', () => {
  it('requests per minute per key', async () => {
    const limited = await startGateway({ config: { billing: { creditCheck: false, rateLimits: { requestsPerMinute: 3 } } } });
    try {
      // Fixed one-minute windows: the five requests go well inside one (a new minute would let the fourth through).
      const intoMinute = Date.now() % 60_000;
      if (intoMinute > 45_000) await new Promise((r) => setTimeout(r, 60_000 - intoMinute + 200));
      const replies = [];
      for (let i = 0; i < 5; i++) replies.push(await post(`${limited.base}/chat/completions`, chat('hi'), limited.key));
      expect(replies.slice(0, 3).every((r) => r.status === 200)).toBe(true);
      expectEnvelope(replies[3]!, 429, 'rate_limit_exceeded', 'rate_limit_error');
      expect(Number(replies[3]!.headers.get('retry-after'))).toBeGreaterThan(0);
    } finally {
      await limited.stop();
    }
  });
});

describe('GET /v1/usage', () => {
  it('balance, currency, period spend, cap and usage by day and alias; aliases only', async () => {
    const { tenant, key } = await newTenant(5_000_000);
    await gw.admin.setCap(tenant, 9_000_000);
    await post(`${gw.base}/chat/completions`, chat('a #sim:tokens=3'), key);
    await post(`${gw.base}/chat/completions`, chat('b #sim:tokens=3', { model: 'svc-core' }), key);
    const a = await settled(tenant);
    const r = await call(`${gw.base}/usage`, { key });
    expect(r.status, r.text).toBe(200);
    const today = new Date().toISOString().slice(0, 10);
    expect(r.json).toMatchObject({
      object: 'usage',
      currency: 'CHF',
      credit_check: true,
      balance: a.balance,
      held: 0,
      available: a.balance,
      period: { start: `${today.slice(0, 7)}-01`, spend: a.spent, spend_cap: 9_000_000 },
      range: { to: today },
    });
    const aliases = r.json.data.map((d: any) => d.alias).sort();
    expect(aliases).toEqual(['svc-core', 'svc-quick']);
    expect(r.json.totals.requests).toBe(2);
    expect(r.json.totals.cost).toBe(5_000_000 - a.balance);
    expect(r.text).not.toMatch(/sim-(quick|core)/);
    expect(r.json.svc.request_id).toBe(r.headers.get('x-request-id'));
  });

  it('takes a bearer key and a date range; refuses bad ranges and sessions', async () => {
    const { key } = await newTenant(0);
    const r = await call(`${gw.base}/usage?from=2026-01-01&to=2026-01-31`, { headers: { authorization: `Bearer ${key}` } });
    expect(r.status).toBe(200);
    expect(r.json.range).toEqual({ from: '2026-01-01', to: '2026-01-31' });
    expect(r.json.data).toEqual([]);
    expectEnvelope(await call(`${gw.base}/usage?from=2026-13-01`, { key }), 400, 'invalid_request');
    expectEnvelope(await call(`${gw.base}/usage?from=2026-02-01&to=2026-01-01`, { key }), 400, 'invalid_request');
    const token = await gw.session({ workspaces: [gw.tenantId] });
    expectEnvelope(await call(`${gw.base}/usage`, { headers: { authorization: `Bearer ${token}` } }), 503, 'identity_provider_unavailable');
  });
});

describe('operator CLI: credits, caps, ledger', () => {
  const cli = (...args: string[]) => cliJson(gw, ...args);

  it('grants (idempotently), deducts, sets and clears a cap, reads the ledger', async () => {
    const { tenant } = await newTenant(0);
    const g1 = await cli('credits', 'grant', '--tenant', tenant, '--amount', '12.5', '--key', 'topup-1', '--reason', 'test');
    const g2 = await cli('credits', 'grant', '--tenant', tenant, '--amount', '12.5', '--key', 'topup-1');
    expect(g1).toMatchObject({ type: 'grant', amount: 12_500_000, balanceAfter: 12_500_000 });
    expect(g2.id).toBe(g1.id); // applied once
    const d = await cli('credits', 'deduct', '--tenant', tenant, '--amount', '0.5');
    expect(d).toMatchObject({ type: 'deduct', amount: -500_000, balanceAfter: 12_000_000 });
    await expect(cli('credits', 'deduct', '--tenant', tenant, '--amount', '100')).rejects.toThrow();
    expect(await cli('cap', 'set', '--tenant', tenant, '--amount', '50')).toMatchObject({ spend_cap: 50_000_000 });
    expect(await cli('account', '--tenant', tenant)).toMatchObject({ balance: 12_000_000, cap: 50_000_000 });
    expect(await cli('cap', 'clear', '--tenant', tenant)).toMatchObject({ spend_cap: null });
    const ledger = await cli('ledger', '--tenant', tenant);
    expect(ledger.map((e: any) => e.amount)).toEqual([-500_000, 12_500_000]);
  });
});
