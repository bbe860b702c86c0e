// A refusal costs the sidecar one gRPC call (the check), not two: Envoy skips ext_proc for a
// request ext_authz admitted no tenant for (envoy-config.ts onlyForAdmitted). Before, every
// local reply (an ext_authz denial, Envoy's own 404 or 413) opened an ext_proc stream whose
// headers and body the sidecar echoed, so a flood of 401s or 429s cost it as many gRPC streams as
// served chats. Counted from Envoy's own stats; the answers are still the error envelopes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, UUID, type TestGateway } from '../harness/gateway.js';

let gw: TestGateway;
let broke: string;

beforeAll(async () => {
  gw = await startGateway({ store: 'redis', config: { billing: { creditCheck: true } } });
  await gw.admin.adjustCredits(gw.tenantId, 50_000_000, 'refusal-grant', 'refusal test');
  const t = await gw.admin.createTenant('no credit');
  broke = (await gw.admin.createKey(t.id, { scopes: ['ai'] })).key;
}, 60_000);
afterAll(async () => {
  await gw?.stop();
});

async function counters(): Promise<{ extProcStreams: number; sidecarCalls: number }> {
  const text = await (await fetch(`${gw.stack.envoyAdminUrl}/stats?filter=^(http\\.gateway\\.ext_proc\\.streams_started|cluster\\.sidecar\\.upstream_rq_total)$`)).text();
  const value = (name: string) => Number(new RegExp(`${name.replace(/\./g, '\\.')}: (\\d+)`).exec(text)?.[1] ?? 0);
  return { extProcStreams: value('http.gateway.ext_proc.streams_started'), sidecarCalls: value('cluster.sidecar.upstream_rq_total') };
}

const chatBody = JSON.stringify({ model: 'svc-quick', messages: [{ role: 'user', content: 'hello' }] });
const post = (path: string, headers: Record<string, string>, body = chatBody) =>
  fetch(`${gw.base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });

describe('refusals', () => {
  it.each([
    ['no key (401)', () => post('/chat/completions', {}), 401],
    ['an unknown key (401)', () => post('/chat/completions', { 'x-api-key': `svc_pk_${'a'.repeat(43)}` }), 401],
    ['no credit (402)', () => post('/chat/completions', { 'x-api-key': broke }), 402],
    ['a bad body (400)', () => post('/chat/completions', { 'x-api-key': gw.key }, '{"model":'), 400],
    ['an unknown path (404)', () => post('/nothing-here', { 'x-api-key': gw.key }), 404],
  ] as const)('%s: the error envelope, and no ext_proc stream', async (_what, send, status) => {
    const before = await counters();
    const res = await send();
    const body = (await res.json()) as { error: { request_id: string } };
    const after = await counters();
    expect(res.status).toBe(status);
    expect(body.error.request_id).toMatch(UUID);
    expect(after.extProcStreams - before.extProcStreams).toBe(0);
    expect(after.sidecarCalls - before.sidecarCalls).toBeLessThanOrEqual(1);
  });

  it('an admitted chat and a models list still go through ext_proc (one stream each)', async () => {
    const before = await counters();
    const chat = await post('/chat/completions', { 'x-api-key': gw.key });
    expect(chat.status).toBe(200);
    expect(((await chat.json()) as { model: string }).model).toBe('svc-quick');
    const models = await fetch(`${gw.base}/models`, { headers: { 'x-api-key': gw.key } });
    expect(models.status).toBe(200);
    await models.arrayBuffer();
    const after = await counters();
    expect(after.extProcStreams - before.extProcStreams).toBe(2);
  });
});
