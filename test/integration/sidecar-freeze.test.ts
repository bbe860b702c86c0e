// A sidecar that stops answering without dying (SIGSTOP: as a stuck event loop or a paused
// container looks to Envoy). Full-duplex ext_proc has no message timeout, and the local reply of a
// failed ext_authz call still passes through ext_proc, so before the sidecar cluster's HTTP/2
// keepalive was tightened, chats in flight or sent during the freeze waited for the PING of the
// old 30 s interval (37 to 40 s measured), or with a shorter provider idle timeout got a 502 that
// blamed the provider; and until ext_proc was skipped for refusals, a chat sent during the freeze
// waited for the same PING after its check had failed. With the production idle timeout (300 s) set here, every caller now has
// the 503 envelope (or, on a stream already under way, the end of its connection) within
// seconds, and the money is exact once the sidecar resumes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SIDECAR_KEEPALIVE } from '../../sidecar/stack/envoy-config.js';
import { startGateway, UUID, type TestGateway } from '../harness/gateway.js';
import { books, reconciles, untilNothingHeld } from '../harness/money.js';
import { readSse } from '../harness/sse.js';
import { until } from '../harness/until.js';

const LEASE_SECONDS = 2;
let gw: TestGateway;
let tenant: string;
let key: string;

beforeAll(async () => {
  gw = await startGateway({ store: 'redis', config: { billing: { creditCheck: true, holdLeaseSeconds: LEASE_SECONDS }, upstream: { idleTimeoutMs: 300_000 } } });
  const t = await gw.admin.createTenant('frozen sidecar');
  tenant = t.id;
  key = (await gw.admin.createKey(t.id, { scopes: ['ai'] })).key;
  await gw.admin.adjustCredits(t.id, 50_000_000, 'freeze-grant', 'freeze test');
}, 60_000);
afterAll(async () => {
  await gw?.stop();
});

interface Answer {
  readonly status: number;
  readonly body: string;
  readonly endedAt: number;
}

const chat = (content: string): Promise<Answer> =>
  fetch(`${gw.base}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key },
    body: JSON.stringify({ model: 'svc-quick', messages: [{ role: 'user', content }] }),
    signal: AbortSignal.timeout(120_000),
  }).then(async (r) => ({ status: r.status, body: await r.text(), endedAt: Date.now() }));

function expectUnavailable(a: Answer): void {
  expect(a.status).toBe(503);
  const e = (JSON.parse(a.body) as { error: Record<string, unknown> }).error;
  expect(e.code).toBe('service_unavailable');
  expect(e.request_id).toMatch(UUID);
}

describe('a sidecar that stops answering', () => {
  it('callers in flight and new ones get the 503 envelope within the keepalive bound, not the provider idle timeout; the books reconcile after', async () => {
    const sidecar = gw.stack.process('sidecar').pid!;
    const providerChats = async (): Promise<number> => (await gw.sim('/_sim/stats')).requestsByPath['/v1/chat/completions'] ?? 0;
    const seen = await providerChats();
    // A JSON chat whose provider answers after 5 s (after the freeze), and a stream under way (6 s long).
    const inFlight = chat('slow answer #sim:delay=5000');
    let streamEvents = 0;
    const stream = readSse(
      `${gw.base}/chat/completions`,
      { model: 'svc-quick', stream: true, messages: [{ role: 'user', content: 'story #sim:tokens=60 #sim:chunk-delay=100' }] },
      key,
      { timeoutMs: 120_000, onEvent: () => void streamEvents++ },
    ).then((r) => ({ ...r, endedAt: Date.now() }));
    // Frozen once both are past the sidecar's checks: the chat at the provider, the stream's first events with the caller.
    await until('the chat at the provider and the stream under way', async () => streamEvents > 0 && (await providerChats()) >= seen + 2, 10_000);
    process.kill(sidecar, 'SIGSTOP');
    const frozenAt = Date.now();
    let answers: [Answer, Answer, { status: number; events: string[]; endedAt: number }];
    try {
      // Sent while frozen: its check gives up after 2 s, and its 503 leaves at once (Envoy
      // skips ext_proc for a request with no admitted tenant: it does not wait for the PING).
      const fresh = chat('sent while frozen');
      answers = await Promise.all([inFlight, fresh, stream]);
    } finally {
      process.kill(sidecar, 'SIGCONT');
    }
    const [json, fresh, streamed] = answers;
    // The bound: the ext_authz timeout (2 s), then one unanswered PING (3 s interval with Envoy's
    // 15 % jitter, plus its 5 s timeout: 8.5 s), with room for a slow box. Before: 37 to 40 s.
    expect(SIDECAR_KEEPALIVE.intervalS * 1.15 + SIDECAR_KEEPALIVE.timeoutS).toBeLessThanOrEqual(8.5);
    const boundMs = 16_000;
    for (const a of [json, fresh, streamed]) expect(a.endedAt - frozenAt).toBeLessThan(boundMs);
    expect(fresh.endedAt - frozenAt).toBeLessThan(5_000);
    expectUnavailable(json);
    expectUnavailable(fresh);
    // The stream had its headers and first events; Envoy cannot write an event for the sidecar,
    // so the caller sees the connection end without [DONE].
    expect(streamed.status).toBe(200);
    expect(streamed.events.length).toBeGreaterThan(0);
    expect(streamed.events.at(-1)).not.toBe('[DONE]');

    // Resumed: it serves again, nothing stays held, and what was charged is what was counted.
    let after: Answer | null = null;
    for (const end = Date.now() + 15_000; Date.now() < end; ) {
      after = await chat('after the freeze');
      if (after.status === 200) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    expect(after?.status).toBe(200);
    await untilNothingHeld(gw.admin, tenant, 1.5 * LEASE_SECONDS * 1000 + 5_000);
    const money = reconciles(await books(gw.admin, tenant));
    expect(money.ok, money.detail).toBe(true);
  }, 90_000);
});
