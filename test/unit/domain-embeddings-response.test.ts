/** rewriteEmbeddings: alias, svc block with request_count, vendor fields dropped, shape checks. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { admitEmbeddings } from '../../sidecar/src/domain/embeddings-request.js';
import { rewriteEmbeddings } from '../../sidecar/src/domain/embeddings-response.js';
import type { InferenceContext } from '../../sidecar/src/domain/request-context.js';

const cfg = parseConfig(defaultConfig('svc'));
const catalog = new Catalog(cfg.models, cfg.brand);

function ctxFor(input: string | string[], model = 'svc-embed'): InferenceContext {
  const a = admitEmbeddings({ model, input }, catalog, 16);
  if (!a.ok) throw new Error('refused');
  return a.ctx;
}

const item = (index: number, embedding: unknown = [0.1, 0.2]) => ({ object: 'embedding', index, embedding, vendor: 'x' });
const provider = (n: number) => ({
  object: 'list',
  model: 'sim-embed-1',
  provider: 'sim',
  id: 'emb-123',
  data: Array.from({ length: n }, (_, i) => item(i)),
  usage: { prompt_tokens: 7, total_tokens: 7 },
});

const run = (raw: unknown, ctx: InferenceContext, brand = 'svc') =>
  rewriteEmbeddings(Buffer.from(typeof raw === 'string' ? raw : JSON.stringify(raw)), ctx, 'req-9', brand);

describe('rewriteEmbeddings', () => {
  it('rewrites model, keeps data, adds usage and the svc block with request_count', () => {
    const r = run(provider(2), ctxFor(['a', 'b'], 'svc-embed-2026-08'));
    if (!r.ok) throw new Error('not ok');
    const body = JSON.parse(String(r.body)) as Record<string, unknown>;
    expect(body).toEqual({
      object: 'list',
      data: [
        { object: 'embedding', index: 0, embedding: [0.1, 0.2] },
        { object: 'embedding', index: 1, embedding: [0.1, 0.2] },
      ],
      model: 'svc-embed-2026-08',
      usage: { prompt_tokens: 7, total_tokens: 7 },
      svc: { alias: 'svc-embed-2026-08', request_id: 'req-9', request_count: 2 },
    });
    expect(r.usage).toEqual({ promptTokens: 7, completionTokens: 0, totalTokens: 7, estimated: false });
    expect(String(r.body)).not.toContain('sim-embed-1');
    expect(String(r.body)).not.toContain('emb-123');
  });

  it('accepts base64 embeddings and fills a missing index', () => {
    const r = run({ data: [{ embedding: 'AAAA' }] }, ctxFor('a'));
    if (!r.ok) throw new Error('not ok');
    expect(JSON.parse(String(r.body)).data).toEqual([{ object: 'embedding', index: 0, embedding: 'AAAA' }]);
    // No provider usage: estimated from the input ('a' → 1 token), no completion tokens.
    expect(r.usage).toEqual({ promptTokens: 1, completionTokens: 0, totalTokens: 1, estimated: true });
    expect(JSON.parse(String(r.body)).usage).toEqual({ prompt_tokens: 1, total_tokens: 1 });
  });

  it('no or malformed usage → estimated from the inputs and reported in the body', () => {
    const ctx = ctxFor(['abcdefgh', 'ijklmnopq']); // 17 characters → 5 tokens
    expect(ctx.promptEstimate).toBe(5);
    for (const u of [undefined, null, { prompt_tokens: -1 }, { prompt_tokens: 'x' }]) {
      const r = run({ ...provider(2), usage: u }, ctx);
      if (!r.ok) throw new Error('not ok');
      expect(r.usage).toEqual({ promptTokens: 5, completionTokens: 0, totalTokens: 5, estimated: true });
      expect(JSON.parse(String(r.body)).usage).toEqual({ prompt_tokens: 5, total_tokens: 5 });
    }
  });

  it('names the block after the brand', () => {
    const r = run(provider(1), ctxFor('a'), 'acme');
    expect(r.ok && JSON.parse(String(r.body)).acme).toEqual({ alias: 'svc-embed', request_id: 'req-9', request_count: 1 });
  });

  it('a count mismatch with the request → ok:false', () => {
    expect(run(provider(1), ctxFor(['a', 'b']))).toEqual({ ok: false });
    expect(run(provider(3), ctxFor(['a', 'b']))).toEqual({ ok: false });
  });

  it.each([
    ['not JSON', 'oops'],
    ['no data', { object: 'list' }],
    ['data not an array', { data: 'x' }],
    ['an item without embedding', { data: [{ index: 0 }] }],
    ['an item with a numeric embedding', { data: [{ index: 0, embedding: 5 }] }],
    ['an item that is not an object', { data: [null] }],
  ])('%s → ok:false', (_name, raw) => {
    expect(run(raw, ctxFor('a'))).toEqual({ ok: false });
  });
});

describe("rewriteEmbeddings with a long list: the provider's vectors copied, not written again", () => {
  const inputs = (n: number) => Array.from({ length: n }, (_, i) => `text ${i}`);
  /** A provider's answer written by hand: its own number format and spacing, vendor fields, members in its order. */
  const handWritten = (n: number) =>
    `{ "data" : [ ${Array.from({ length: n }, (_, i) => `{"vendor":"x", "embedding" : [ 0.10000, -2.5E-3, ${i}.0 ], "index":${i},"object":"embedding"}`).join(' , ')} ], "model":"sim-embed-1", "id":"emb-123", "usage":{"prompt_tokens":7,"total_tokens":7} }`;

  it('sends each vector as the provider wrote it, and the rest as before', () => {
    const text = handWritten(12);
    expect(text.length).toBeGreaterThanOrEqual(512);
    const r = rewriteEmbeddings(Buffer.from(text), ctxFor(inputs(12)), 'req-9', 'svc');
    if (!r.ok) throw new Error('not ok');
    const out = String(r.body);
    expect(out).toContain('{"object":"embedding","index":3,"embedding":[ 0.10000, -2.5E-3, 3.0 ]}');
    expect(out).not.toContain('sim-embed-1');
    expect(out).not.toContain('vendor');
    expect(JSON.parse(out)).toEqual({
      object: 'list',
      data: Array.from({ length: 12 }, (_, i) => ({ object: 'embedding', index: i, embedding: [0.1, -0.0025, i] })),
      model: 'svc-embed',
      usage: { prompt_tokens: 7, total_tokens: 7 },
      svc: { alias: 'svc-embed', request_id: 'req-9', request_count: 12 },
    });
  });

  it('reads to the same JSON as writing it again, for any list', () => {
    const vector = fc.oneof(fc.array(fc.double({ noNaN: true, noDefaultInfinity: true }), { maxLength: 40 }), fc.base64String({ maxLength: 80 }));
    fc.assert(
      fc.property(fc.array(vector, { minLength: 1, maxLength: 12 }), fc.constantFrom(undefined, 1), (vectors, indent) => {
        const answer = { object: 'list', model: 'sim-embed-1', data: vectors.map((embedding, index) => ({ object: 'embedding', index, embedding, extra: { a: [1] } })) };
        const raw = Buffer.from(JSON.stringify(answer, null, indent));
        const r = rewriteEmbeddings(raw, ctxFor(inputs(vectors.length)), 'req-9', 'svc');
        if (!r.ok) throw new Error('not ok');
        expect(JSON.parse(String(r.body))).toEqual({
          object: 'list',
          data: JSON.parse(JSON.stringify(vectors.map((embedding, index) => ({ object: 'embedding', index, embedding })))),
          model: 'svc-embed',
          usage: { prompt_tokens: expect.any(Number), total_tokens: expect.any(Number) },
          svc: { alias: 'svc-embed', request_id: 'req-9', request_count: vectors.length },
        });
      }),
      { numRuns: 300 },
    );
  });

  it("keeps the provider's index, and writes a short answer again whole", () => {
    const text = handWritten(12).replace('"index":0,', '"index":7,');
    const r = rewriteEmbeddings(Buffer.from(text), ctxFor(inputs(12)), 'req-9', 'svc');
    if (!r.ok) throw new Error('not ok');
    expect(String(r.body)).toContain('{"object":"embedding","index":7,"embedding":[ 0.10000, -2.5E-3, 0.0 ]}');
    const short = handWritten(1);
    expect(short.length).toBeLessThan(512);
    const s = rewriteEmbeddings(Buffer.from(short), ctxFor(inputs(1)), 'req-9', 'svc');
    if (!s.ok) throw new Error('not ok');
    expect(String(s.body)).toContain('"embedding":[0.1,-0.0025,0]');
  });

  it('writes the list again when a key in an element is written with an escape', () => {
    const text = handWritten(12).replace('"embedding" : [ 0.10000, -2.5E-3, 4.0 ]', '"\\u0065mbedding" : [ 0.10000, -2.5E-3, 4.0 ]');
    const r = rewriteEmbeddings(Buffer.from(text), ctxFor(inputs(12)), 'req-9', 'svc');
    if (!r.ok) throw new Error('not ok');
    expect(JSON.parse(String(r.body)).data[4].embedding).toEqual([0.1, -0.0025, 4]);
    expect(String(r.body)).toContain('"embedding":[0.1,-0.0025,4]');
  });

  it('writes the list again when the answer is not valid UTF-8', () => {
    const text = handWritten(12).replace('"id":"emb-123"', '"id":"emb-\u0001"');
    const bytes = Buffer.from(text.replace('\u0001', '#'));
    bytes[bytes.indexOf('emb-#') + 4] = 0xff;
    const r = rewriteEmbeddings(bytes, ctxFor(inputs(12)), 'req-9', 'svc');
    if (!r.ok) throw new Error('not ok');
    expect(String(r.body)).toContain('"embedding":[0.1,-0.0025,3]');
  });
});
