import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from '../harness/gateway.js';
import { expectEnvelope, post } from '../harness/http.js';
import { holdFor, reconciles, untilNothingHeld } from '../harness/money.js';
import { readSse } from '../harness/sse.js';
import { until } from '../harness/until.js';

/**
 * Two sidecar processes behind Envoy's one sidecar cluster, on one Redis,
 * credit check on. A request's ext_authz check (which places the credit hold)
 * and its ext_proc stream (which claims, settles or releases it) may reach
 * different processes; every request is still served, held once and booked once.
 */
let gw: TestGateway;

beforeAll(async () => {
  // Short lease: the holds of a killed process are reaped within seconds. The provider takes 3 s for
  // the burst a process is killed in (an idle timeout well above that).
  gw = await startGateway({
    store: 'redis',
    sidecars: 2,
    config: { upstream: { idleTimeoutMs: 30_000 }, billing: { creditCheck: true, claimGraceSeconds: 3, holdLeaseSeconds: 2 } },
  });
}, 120_000);
afterAll(async () => {
  await gw?.stop();
});

const chat = (content: string, extra: Record<string, unknown> = {}) => ({ model: 'svc-quick', max_tokens: 50, messages: [{ role: 'user', content }], ...extra });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Which sidecar process logged each request's line (its ext_proc ran there), polled until every id is found. */
async function servedBy(ids: readonly string[], timeoutMs = 10_000): Promise<Map<string, string>> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const by = new Map<string, string>();
    for (const s of gw.stack.sidecars) {
      for (const line of s.process.lines) {
        if (!line.includes('"msg":"request"')) continue;
        const id = /"request_id":"([^"]+)"/.exec(line)?.[1];
        if (id && ids.includes(id)) by.set(id, s.process.name);
      }
    }
    if (by.size === ids.length || Date.now() > until) return by;
    await sleep(100);
  }
}

/** A gauge of each sidecar process's /metrics. */
async function gauges(name: string): Promise<number[]> {
  const out: number[] = [];
  for (const s of gw.stack.sidecars) {
    const text = await (await fetch(`${s.adminUrl}/metrics`, { headers: { authorization: `Bearer ${gw.stack.adminToken}` } })).text();
    const line = text.split('\n').find((l) => l.startsWith(`${name} `));
    if (!line) throw new Error(`${s.process.name}: no ${name}`);
    out.push(Number(line.slice(name.length + 1)));
  }
  return out;
}

/** A gauge summed over every sidecar process's /metrics. */
async function gaugeSum(name: string): Promise<number> {
  return (await gauges(name)).reduce((a, b) => a + b, 0);
}

describe('two sidecar processes behind one Envoy cluster', () => {
  it('a burst of JSON and streamed requests: all served, both processes serve, nothing left held, the books reconcile to the micro-unit', async () => {
    expect(gw.stack.sidecars.map((s) => s.process.name)).toEqual(['sidecar', 'sidecar-2']);
    const t = await gw.admin.createTenant('cores');
    const k = await gw.admin.createKey(t.id, {});
    const json = chat('cores json #sim:tokens=7 #sim:delay=50');
    const streamed = chat('cores stream #sim:tokens=9', { stream: true, stream_options: { include_usage: true } });
    const JSON_N = 60;
    const STREAM_N = 30;
    const opening = JSON_N * holdFor(gw.config, json) + STREAM_N * holdFor(gw.config, streamed) + 1_000_000;
    await gw.admin.adjustCredits(t.id, opening, `cores-${t.id}`, 'burst');

    const [jsonReplies, streams] = await Promise.all([
      Promise.all(Array.from({ length: JSON_N }, () => post(`${gw.base}/chat/completions`, json, k.key))),
      Promise.all(Array.from({ length: STREAM_N }, () => readSse(`${gw.base}/chat/completions`, streamed, k.key))),
    ]);
    for (const r of jsonReplies) expect(r.status, r.text).toBe(200);
    for (const s of streams) {
      expect(s.status).toBe(200);
      expect(s.error).toBeNull();
      expect(s.events.at(-1)).toBe('[DONE]');
    }

    const ids = [...jsonReplies.map((r) => r.headers.get('x-request-id')), ...streams.map((s) => s.headers.get('x-request-id'))] as string[];
    expect(new Set(ids).size).toBe(JSON_N + STREAM_N);
    const by = await servedBy(ids);
    expect(by.size).toBe(ids.length); // each request logged once, by one process
    const counts = new Map<string, number>();
    for (const name of by.values()) counts.set(name, (counts.get(name) ?? 0) + 1);
    expect([...counts.keys()].sort()).toEqual(['sidecar', 'sidecar-2']);

    // Every hold settled (a hold placed by one process and claimed by the other included), none released twice.
    const b = await untilNothingHeld(gw.admin, t.id, 30_000);
    const r = reconciles(b); // opening balance 0: the grant is in the ledger
    expect(r.ok, r.detail).toBe(true);
    expect(b.granted).toBe(opening);
    expect(b.usageIds).toEqual(new Set(ids));
    expect(b.usage).toHaveLength(ids.length);
    expect(b.charged).toBeGreaterThan(0);
    // After the claim grace period, no process releases a hold another one settled: the books stay as they are.
    await sleep((gw.config.billing.claimGraceSeconds + 1) * 1000);
    const later = await untilNothingHeld(gw.admin, t.id, 5_000);
    expect(later.balance).toBe(b.balance);
    expect(later.charged).toBe(b.charged);
    // The hold gauges agree: a hold one process placed and the other claimed is closed once, where it was opened.
    expect(await gaugeSum('gateway_credit_held_micro')).toBe(0);
    expect(await gaugeSum('gateway_credit_holds_open')).toBe(0);
  }, 90_000);

  it('kill -9 of one process mid-burst: the other serves on, the dead one\'s holds are reaped, the books reconcile', async () => {
    const t = await gw.admin.createTenant('cores-kill');
    const k = await gw.admin.createKey(t.id, {});
    const slow = chat('cores kill #sim:tokens=5 #sim:delay=3000');
    const opening = 100 * holdFor(gw.config, slow);
    await gw.admin.adjustCredits(t.id, opening, `cores-kill-${t.id}`, 'burst');
    const burst = (n: number, body: unknown) => Promise.all(Array.from({ length: n }, () => post(`${gw.base}/chat/completions`, body, k.key)));

    const during = burst(40, slow);
    // The burst's requests in flight on both processes (each holds credit for some): killed in the middle of them.
    await until('requests of the burst held on both processes', async () => (await gauges('gateway_credit_holds_open')).every((n) => n > 0), 10_000);
    gw.stack.process('sidecar-2').signal('SIGKILL');
    const first = await during;
    // Those the dead process held fail with the gateway's envelope; the rest are served.
    for (const r of first.filter((x) => x.status !== 200)) {
      expect([500, 502, 503]).toContain(r.status);
      expectEnvelope(r, r.status, r.json?.error?.code ?? 'missing');
    }
    expect(first.some((r) => r.status === 200)).toBe(true);

    // Envoy has left the dead process out: what comes next is served by the one left.
    const after = await burst(20, chat('cores after #sim:tokens=5'));
    for (const r of after) expect(r.status, r.text).toBe(200);

    // The dead process's holds lapse (lease 2 s) and the survivor's reaper releases them.
    const b = await untilNothingHeld(gw.admin, t.id, 30_000);
    const r = reconciles(b);
    expect(r.ok, r.detail).toBe(true);
    const sent = new Set([...first, ...after].map((x) => x.headers.get('x-request-id')));
    for (const id of b.usageIds) expect(sent.has(id)).toBe(true); // nothing booked that was not asked for
    for (const x of after) expect(b.usageIds.has(x.headers.get('x-request-id') as string)).toBe(true);
  }, 90_000);
});
