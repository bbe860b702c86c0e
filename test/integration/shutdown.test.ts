/**
 * Stops and crashes of the sidecar through real Envoy, with Redis and the
 * credit check on: a normal stop (SIGTERM) drains (readiness false, new
 * requests a 503 envelope, exchanges in flight run to their end, those left at
 * the drain deadline end with the error event and are charged for what they
 * delivered, one log line each); a crash (kill -9) leaves holds that are
 * released when their lease runs out, while a live stream keeps its hold for
 * as long as it runs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from '../harness/gateway.js';
import { expectEnvelope, post } from '../harness/http.js';
import { books, holdFor, reconciles, untilNothingHeld } from '../harness/money.js';
import { readSse, type SseRead } from '../harness/sse.js';
import { until } from '../harness/until.js';
import { listeningLine } from '../../sidecar/stack/process.js';

// Windows a stalled box (a process held up for a second or two) cannot run past: streams meant to
// end inside the drain deadline have seconds to spare, and a live hold's lease (renewed every third
// of it) outlasts a stall of a few seconds.
const DRAIN_SECONDS = 10;
const LEASE_SECONDS = 5;
/** Documented bound: a dead instance's holds are released within 1.5 × the lease (plus the restart here). */
const RELEASE_BOUND_MS = 1.5 * LEASE_SECONDS * 1000 + 20_000;

let gw: TestGateway;
beforeAll(async () => {
  gw = await startGateway({
    store: 'redis',
    config: { billing: { creditCheck: true, holdLeaseSeconds: LEASE_SECONDS }, shutdown: { drainSeconds: DRAIN_SECONDS } },
  });
});
afterAll(async () => {
  await gw?.stop();
});

const stream = (tokens: number, chunkDelayMs: number) => ({
  model: 'svc-quick',
  stream: true,
  max_tokens: tokens + 10,
  messages: [{ role: 'user', content: `long answer #sim:tokens=${tokens} #sim:chunk-delay=${chunkDelayMs}` }],
});

async function newTenant(credits: number) {
  // Each test starts from a running sidecar, whatever the one before left.
  const sidecar = gw.stack.process('sidecar');
  if (!sidecar.running) {
    await sidecar.restart();
    await sidecar.waitForLine(listeningLine, 20_000);
  }
  const t = await gw.admin.createTenant('shutdown');
  const k = await gw.admin.createKey(t.id, {});
  await gw.admin.adjustCredits(t.id, credits, `grant-${t.id}`, 'test');
  return { tenant: t.id, key: k.key };
}

const simChats = async (): Promise<number> => (await gw.sim('/_sim/stats')).requestsByPath['/v1/chat/completions'] ?? 0;

/** The sidecar's one log line per exchange, by request id. */
function requestLines(lines: readonly string[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const l of lines) {
    if (!l.includes('"msg":"request"')) continue;
    const id = (JSON.parse(l) as { request_id?: string }).request_id;
    if (id) out.set(id, (out.get(id) ?? 0) + 1);
  }
  return out;
}

const idOf = (r: SseRead): string | null => r.headers.get('x-request-id');
const done = (r: SseRead) => r.events.at(-1) === '[DONE]';

describe('a normal stop (SIGTERM) drains', () => {
  it('during 20 streams: readiness 503 and new requests a 503 envelope at once; every stream completes; held back to 0; one log line each', async () => {
    const { tenant, key } = await newTenant(50_000_000);
    const sidecar = gw.stack.process('sidecar');
    const seen = await simChats();
    // ~4 s each: well inside the drain deadline (and the sidecar drains, not ready, for that long).
    const streams = Array.from({ length: 20 }, () => readSse(`${gw.base}/chat/completions`, stream(40, 100), key, { timeoutMs: 30_000 }));
    await until('every stream holding credit', async () => (await gw.admin.account(tenant)).held > 0 && (await simChats()) >= seen + 20, 15_000);
    sidecar.signal('SIGTERM');
    const readyz = `${gw.stack.adminUrl}/readyz`;
    await until('readyz 503', async () => (await fetch(readyz).then((r) => r.status, () => 0)) === 503, 10_000);
    const refused = await post(`${gw.base}/chat/completions`, { model: 'svc-quick', messages: [{ role: 'user', content: 'new' }] }, key);
    expectEnvelope(refused, 503, 'service_unavailable', 'api_error');
    expect(refused.headers.get('retry-after')).toBe('1');

    const results = await Promise.all(streams);
    await sidecar.exitedNow();
    const lines = [...sidecar.lines];
    for (const r of results) {
      expect(r.status).toBe(200);
      expect(r.error).toBeNull();
      expect(done(r)).toBe(true);
    }
    const logged = requestLines(lines);
    for (const r of results) expect(logged.get(idOf(r)!)).toBe(1);
    expect(lines.some((l) => l.includes('drained; closing the store connections'))).toBe(true);

    await sidecar.restart();
    await sidecar.waitForLine(listeningLine, 20_000);
    const b = await untilNothingHeld(gw.admin, tenant, 10_000);
    const check = reconciles(b);
    expect(check.ok, check.detail).toBe(true);
    for (const r of results) expect(b.usageIds.has(idOf(r)!)).toBe(true);
  });

  it('streams still open at the drain deadline end with the error event (no [DONE]) and are charged for what they delivered', async () => {
    const { tenant, key } = await newTenant(50_000_000);
    const sidecar = gw.stack.process('sidecar');
    const seen = await simChats();
    // ~20 s each: far beyond the 10 s drain deadline.
    const streams = Array.from({ length: 5 }, () => readSse(`${gw.base}/chat/completions`, stream(200, 100), key, { timeoutMs: 30_000 }));
    await until('every stream delivering', async () => (await simChats()) >= seen + 5, 15_000);
    await new Promise((r) => setTimeout(r, 500));
    sidecar.signal('SIGTERM');
    const results = await Promise.all(streams);
    await sidecar.exitedNow();
    const logged = requestLines(sidecar.lines);
    for (const r of results) {
      expect(r.status).toBe(200);
      expect(done(r)).toBe(false);
      const last = JSON.parse(r.events.at(-1)!) as { error: { code: string; request_id: string } };
      expect(last.error).toMatchObject({ code: 'service_unavailable', request_id: idOf(r) });
      expect(logged.get(idOf(r)!)).toBe(1);
    }
    await sidecar.restart();
    await sidecar.waitForLine(listeningLine, 20_000);
    const b = await untilNothingHeld(gw.admin, tenant, 10_000);
    const check = reconciles(b);
    expect(check.ok, check.detail).toBe(true);
    for (const r of results) {
      const rec = b.usage.find((u) => u.requestId === idOf(r));
      expect(rec, 'charged for what it delivered').toBeDefined();
      // Counted by the gateway from what reached the caller: some, never the whole 200-token answer.
      expect(rec!.estimated).toBe(true);
      expect(rec!.completionTokens as number).toBeGreaterThan(0);
      expect(rec!.completionTokens as number).toBeLessThan(200);
      expect(rec!.cost).toBeGreaterThan(0);
    }
  });
});

describe('a crash (kill -9)', () => {
  it('a stream longer than the lease keeps its hold: renewed while it runs, charged in full at its end', async () => {
    const { tenant, key } = await newTenant(50_000_000);
    const body = stream(130, 100); // ~13 s: more than two leases, and still running seconds after the check below
    const pending = readSse(`${gw.base}/chat/completions`, body, key, { timeoutMs: 30_000 });
    await new Promise((r) => setTimeout(r, 3 * LEASE_SECONDS * 500 + 500)); // past the first lease's end and a reaper pass
    expect((await gw.admin.account(tenant)).held).toBe(holdFor(gw.config, body));
    const r = await pending;
    expect(done(r)).toBe(true);
    const b = await untilNothingHeld(gw.admin, tenant, 10_000);
    expect(reconciles(b).ok, reconciles(b).detail).toBe(true);
    expect(b.usage).toHaveLength(1);
    expect(b.usage[0]!.completionTokens).toBe(130);
  });

  it('with requests in flight: after a restart every hold is released within the documented bound; the balance reconciles to the micro-unit', async () => {
    const { tenant, key } = await newTenant(50_000_000);
    const sidecar = gw.stack.process('sidecar');
    const seen = await simChats();
    const streams = Array.from({ length: 10 }, () => readSse(`${gw.base}/chat/completions`, stream(200, 100), key, { timeoutMs: 30_000 }));
    const json = Array.from({ length: 5 }, () =>
      post(`${gw.base}/chat/completions`, { model: 'svc-quick', max_tokens: 20, messages: [{ role: 'user', content: 'slow #sim:delay=5000' }] }, key),
    );
    await until('holds for every request', async () => (await simChats()) >= seen + 15, 15_000);
    await new Promise((r) => setTimeout(r, 500));
    expect((await gw.admin.account(tenant)).held).toBeGreaterThan(0);
    sidecar.signal('SIGKILL');
    await Promise.all([...streams, ...json]);
    await sidecar.restart();
    await sidecar.waitForLine(listeningLine, 20_000);
    const b = await untilNothingHeld(gw.admin, tenant, RELEASE_BOUND_MS);
    const check = reconciles(b);
    expect(check.ok, check.detail).toBe(true);
    const after = await books(gw.admin, tenant);
    expect(after.held).toBe(0);
  });
});
