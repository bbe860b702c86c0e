import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { startGateway, type TestGateway } from '../harness/gateway.js';
import { Errors } from '../../sidecar/src/domain/errors.js';
import { call, expectEnvelope, expectNoLeak } from '../harness/http.js';

/**
 * Arbitrary bodies and headers against the live gateway: every answer is a
 * success or an envelope with a request id, never a 5xx, never a leak.
 */
let gw: TestGateway;
const INTERNAL = ['sim-quick-1', 'sim-core-1', 'sim-deep-r1', 'sim-embed-1'];

beforeAll(async () => {
  gw = await startGateway();
});
afterAll(async () => {
  await gw?.stop();
});

const jsonValue = fc.jsonValue({ maxDepth: 3 });
const chatLike = fc.record(
  {
    model: fc.oneof(fc.constantFrom('svc-core', 'svc-deep', 'svc-embed', 'sim-core-1', ''), fc.string(), jsonValue),
    messages: fc.oneof(
      fc.array(fc.record({ role: fc.oneof(fc.constantFrom('user', 'system', 'assistant', 'tool'), fc.string()), content: fc.oneof(fc.string(), jsonValue) }, { requiredKeys: [] }), { maxLength: 3 }),
      jsonValue,
    ),
    max_tokens: fc.oneof(fc.integer({ min: -5, max: 100_000 }), jsonValue),
    temperature: fc.oneof(fc.double({ noNaN: true }), jsonValue),
    stream: fc.oneof(fc.boolean(), jsonValue),
    tools: jsonValue,
    n: jsonValue,
  },
  { requiredKeys: [] },
);
const embedLike = fc.record(
  { model: fc.oneof(fc.constantFrom('svc-embed', 'svc-core', 'sim-embed-1'), fc.string()), input: fc.oneof(fc.string(), fc.array(fc.string(), { maxLength: 4 }), jsonValue), encoding_format: fc.oneof(fc.constantFrom('float', 'base64'), fc.string()) },
  { requiredKeys: [] },
);

async function check(path: string, body: string) {
  const r = await call(`${gw.base}${path}`, { method: 'POST', body, key: gw.key, headers: { 'content-type': 'application/json' } });
  expect(r.status, r.text.slice(0, 300)).toBeLessThan(500);
  if (r.status !== 200) {
    expect([400, 413]).toContain(r.status);
    // The code and type come from the one catalogue, for this very status.
    const entry = Object.values(Errors).find((e) => e.code === r.json?.error?.code && e.status === r.status);
    expect(entry, r.text.slice(0, 300)).toBeDefined();
    expectEnvelope(r, r.status, entry!.code, entry!.type);
  }
  expectNoLeak(r, INTERNAL);
}

describe('fuzzing the inference paths through Envoy', () => {
  it('chat: arbitrary JSON bodies', async () => {
    await fc.assert(fc.asyncProperty(chatLike, (b) => check('/chat/completions', JSON.stringify(b))), { numRuns: 150 });
  });

  it('embeddings: arbitrary JSON bodies', async () => {
    await fc.assert(fc.asyncProperty(embedLike, (b) => check('/embeddings', JSON.stringify(b))), { numRuns: 100 });
  });

  it('arbitrary bytes as the body', async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ maxLength: 200 }), fc.constantFrom('/chat/completions', '/embeddings'), (text, path) => check(path, text)),
      { numRuns: 100 },
    );
  });
});
