import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from '../harness/gateway.js';
import { expectEnvelope, expectNoLeak, post } from '../harness/http.js';
import { listeningLine } from '../../sidecar/stack/process.js';

/** Provider and sidecar failures: always an envelope with a request id, never a leak. */
let gw: TestGateway;
const SECRETS = ['sim-core-1', 'sim-embed-1', 'sim-quick-1', 'sim-deep-r1', 'context_length_exceeded'];

beforeAll(async () => {
  gw = await startGateway({ store: 'redis' }); // keys survive a sidecar restart; upstream idle timeout: 3 s
});
afterAll(async () => {
  await gw?.stop();
});

const ask = (content: string, model = 'svc-core') => post(`${gw.base}/chat/completions`, { model, messages: [{ role: 'user', content }] }, gw.key);

describe('the provider fails before answering', () => {
  it.each([
    ['5xx', '#sim:status=500'],
    ['503', '#sim:status=503'],
    ['4xx', '#sim:status=404'],
    ['an over-long prompt (the spec: 502, not 400)', '#sim:context-overflow'],
    ['an empty body', '#sim:empty'],
    ['an unparseable body', '#sim:garbage'],
    ['a reset connection', '#sim:reset'],
  ])('%s → 502 upstream_error, sanitised', async (_name, directive) => {
    const r = await ask(`hello ${directive}`);
    expectEnvelope(r, 502, 'upstream_error', 'api_error');
    expectNoLeak(r, [...SECRETS, gw.upstreamKey]);
    expect(r.headers.get('retry-after')).toBeNull();
  });

  it('embeddings failures are 502 too', async () => {
    const r = await post(`${gw.base}/embeddings`, { model: 'svc-embed', input: ['#sim:status=500'] }, gw.key);
    expectEnvelope(r, 502, 'upstream_error');
    expectNoLeak(r, SECRETS);
  });

  it('a provider that does not answer within the idle timeout → 502', async () => {
    const started = Date.now();
    const r = await ask('slow #sim:delay=8000');
    expectEnvelope(r, 502, 'upstream_error');
    expect(Date.now() - started).toBeLessThan(7000);
  });
});

describe('parts of the gateway are down', () => {
  it('sidecar unreachable → 503 envelope; nothing is forwarded', async () => {
    const before = (await gw.sim('/_sim/stats')).totalRequests;
    // The public health path (for load balancers) follows the sidecar's readiness, through Envoy, without credentials.
    const health = () => fetch(`${gw.stack.gatewayUrl}/healthz`).then(async (h) => ({ status: h.status, body: await h.text() }));
    expect(await health()).toMatchObject({ status: 200, body: expect.stringContaining('"ready"') });
    await gw.stack.process('sidecar').stop();
    expect((await health()).status).toBe(503);
    const r = await ask('hello');
    expectEnvelope(r, 503, 'service_unavailable');
    expect(r.headers.get('retry-after')).toBeNull(); // only the identity 503 carries it
    const models = await fetch(`${gw.base}/models`, { headers: { 'x-api-key': gw.key } });
    expect(models.status).toBe(503);
    const body = await models.json();
    expect(body.error.code).toBe('service_unavailable');
    expect((await gw.sim('/_sim/stats')).totalRequests).toBe(before);

    const sidecar = gw.stack.process('sidecar');
    await sidecar.restart();
    await sidecar.waitForLine(listeningLine, 20_000);
    let status = 0;
    for (let i = 0; i < 50 && status !== 200; i++) {
      status = (await fetch(`${gw.base}/models`, { headers: { 'x-api-key': gw.key } })).status;
      if (status !== 200) await new Promise((r) => setTimeout(r, 100));
    }
    expect(status).toBe(200); // back in service without restarting Envoy
    expect((await health()).status).toBe(200);
  });

  it('provider unreachable → 502 envelope', async () => {
    await gw.stack.process('simulator').stop();
    const r = await ask('anyone there?');
    expectEnvelope(r, 502, 'upstream_error', 'api_error');
    expectNoLeak(r, SECRETS);
  });

});

describe('a JSON answer larger than limits.maxResponseBytes', () => {
  let small: TestGateway;
  beforeAll(async () => {
    // The sidecar collects a JSON answer itself (full duplex); above this it stops.
    small = await startGateway({ store: 'redis', config: { limits: { maxRequestBytes: 32 * 1024, maxResponseBytes: 64 * 1024 } } });
  });
  afterAll(async () => {
    await small?.stop();
  });

  it('is a 502 upstream_error that costs nothing and holds nothing; one that fits is served', async () => {
    const { books } = await import('../harness/money.js');
    const askSmall = (tokens: number) =>
      post(`${small.base}/chat/completions`, { model: 'svc-core', max_tokens: 30_000, messages: [{ role: 'user', content: `tell #sim:tokens=${tokens}` }] }, small.key);
    const r = await askSmall(20_000); // about 120 KB of text
    expectEnvelope(r, 502, 'upstream_error', 'api_error');
    expectNoLeak(r, [...SECRETS, small.upstreamKey]);
    const after = await books(small.admin, small.tenantId);
    expect(after.held).toBe(0);
    expect(Math.abs(after.charged)).toBe(0); // no charge entry at all (the sum of none is -0)
    expect(after.usageCost).toBe(0);
    expect(after.usageIds.has(r.headers.get('x-request-id') ?? '')).toBe(false);
    const ok = await askSmall(200);
    expect(ok.status, ok.text).toBe(200);
    expect(Number(ok.headers.get('content-length'))).toBe(Buffer.byteLength(ok.text));
  });
});
