/** ChatStreamRewriter: chunk rewrite, reasoning removal, held-back usage, errors, split invariance. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { admitChat } from '../../sidecar/src/domain/chat-request.js';
import type { InferenceContext } from '../../sidecar/src/domain/request-context.js';
import { ChatStreamRewriter } from '../../sidecar/src/domain/sse/chat-stream.js';
import { events, sse } from '../harness/sse-frames.js';

const cfg = parseConfig(defaultConfig('svc'));
const catalog = new Catalog(cfg.models, cfg.brand);

function ctxFor(model: string, extra: Record<string, unknown> = {}): InferenceContext {
  const a = admitChat({ model, stream: true, messages: [{ role: 'user', content: 'hi' }], ...extra }, catalog, { defaultTemperature: 0.7 });
  if (!a.ok) throw new Error('refused');
  return a.ctx;
}

/** The request's start second, what the chunks say until the provider gives its own `created`. */
const STARTED = 1_764_331_200;
const rewriter = (ctx = ctxFor('svc-quick')) => new ChatStreamRewriter(ctx, 'req-7', 'svc', 12, STARTED);

const base = { id: 'chatcmpl-up', object: 'chat.completion.chunk', created: 1_700_000_000, model: 'sim-quick-1', system_fingerprint: 'fp' };
const delta = (d: Record<string, unknown>, finish: string | null = null) => ({ ...base, choices: [{ index: 0, delta: d, finish_reason: finish }] });
const usageChunk = { ...base, choices: [], usage: { prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 } };

function run(input: string, r = rewriter(), chunks: Buffer[] = [Buffer.from(input)]): { out: unknown[]; r: ChatStreamRewriter } {
  const text = chunks.map((c) => r.push(c).toString()).join('') + r.end().toString();
  return { out: events(text), r };
}

const normal = sse(
  delta({ role: 'assistant', content: '' }),
  delta({ reasoning_content: 'thinking hard' }),
  delta({ content: 'Hel', reasoning: 'x' }),
  delta({ content: 'lo' }),
  delta({}, 'stop'),
  usageChunk,
  '[DONE]',
);

describe('ChatStreamRewriter', () => {
  it('a provider that leaves out `created` after its first chunk: every chunk keeps the last one given (a number, never null)', () => {
    const { id, object, model } = base;
    const bare = (content: string) => ({ id, object, model, choices: [{ index: 0, delta: { content }, finish_reason: null }] });
    const { out } = run(sse(delta({ content: 'a' }), bare('b'), bare('c'), delta({}, 'stop'), '[DONE]'));
    const chunks = out.filter((e) => e !== '[DONE]') as Array<{ created: unknown }>;
    expect(chunks.map((c) => c.created)).toEqual([1_700_000_000, 1_700_000_000, 1_700_000_000, 1_700_000_000, 1_700_000_000]);
  });

  it('a provider that never sends `created`: every chunk, the final one too, says the request\'s start second', () => {
    const { id, object, model } = base;
    const bare = (content: string) => ({ id, object, model, choices: [{ index: 0, delta: { content }, finish_reason: null }] });
    const stop = { id, object, model, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] };
    const { out } = run(sse(bare('a'), bare('b'), stop, '[DONE]'));
    const chunks = out.filter((e) => e !== '[DONE]') as Array<{ created: unknown }>;
    expect(chunks).toHaveLength(4);
    expect(chunks.map((c) => c.created)).toEqual([STARTED, STARTED, STARTED, STARTED]);
  });

  it('a provider that changes its members before choices mid-stream (created, id) is followed: each chunk is read for itself', () => {
    const later = { ...base, id: 'chatcmpl-other', created: 1_700_000_009 };
    const { out } = run(sse(delta({ content: 'a' }), delta({ content: 'b' }), { ...later, choices: [{ index: 0, delta: { content: 'c' }, finish_reason: null }] }, { ...later, choices: [{ index: 0, delta: { content: 'd', reasoning_content: 'hidden' }, finish_reason: 'stop' }] }, '[DONE]'));
    const chunks = out.filter((e) => e !== '[DONE]') as Array<{ created: number; choices: Array<{ delta: Record<string, unknown> }> }>;
    expect(chunks.map((c) => c.created)).toEqual([1_700_000_000, 1_700_000_000, 1_700_000_009, 1_700_000_009, 1_700_000_009]);
    expect(chunks.slice(0, 4).map((c) => c.choices[0]!.delta)).toEqual([{ content: 'a' }, { content: 'b' }, { content: 'c' }, { content: 'd' }]);
    expect(JSON.stringify(out)).not.toContain('hidden');
  });

  it('every chunk has the chunk object, the alias and the request id', () => {
    const { out } = run(normal);
    const chunks = out.filter((e) => e !== '[DONE]') as Record<string, unknown>[];
    expect(chunks.length).toBeGreaterThan(0);
    for (const c of chunks) {
      expect(c).toMatchObject({ id: 'req-7', object: 'chat.completion.chunk', model: 'svc-quick', created: 1_700_000_000 });
      expect(c).not.toHaveProperty('system_fingerprint');
    }
  });

  it('removes reasoning deltas; reasoning-only chunks vanish', () => {
    const { out } = run(normal);
    expect(JSON.stringify(out)).not.toContain('reasoning');
    expect(JSON.stringify(out)).not.toContain('thinking hard');
    const deltas = (out.slice(0, -2) as { choices: { delta: unknown; finish_reason: unknown }[] }[]).map((c) => c.choices[0]);
    expect(deltas).toEqual([
      { index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null },
      { index: 0, delta: { content: 'Hel' }, finish_reason: null },
      { index: 0, delta: { content: 'lo' }, finish_reason: null },
      { index: 0, delta: {}, finish_reason: 'stop' },
    ]);
  });

  it('holds usage back to the final chunk, with the svc block, right before [DONE]', () => {
    const { out, r } = run(normal);
    expect(out.at(-1)).toBe('[DONE]');
    expect(out.at(-2)).toEqual({
      id: 'req-7', object: 'chat.completion.chunk', created: 1_700_000_000, model: 'svc-quick', choices: [],
      usage: { prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 },
      svc: { alias: 'svc-quick', request_id: 'req-7' },
    });
    expect(out.slice(0, -2).some((c) => JSON.stringify(c).includes('usage'))).toBe(false);
    expect(r.usage()).toEqual({ promptTokens: 9, completionTokens: 4, totalTokens: 13, estimated: false });
    expect(r.completed).toBe(true);
  });

  it('usage on the finish chunk is also held back', () => {
    const input = sse(delta({ content: 'hi' }), { ...delta({}, 'stop'), usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } }, '[DONE]');
    const { out } = run(input);
    expect(out).toHaveLength(4);
    expect(out[1]).not.toHaveProperty('usage');
    expect(out[2]).toMatchObject({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } });
  });

  it('without provider usage the final chunk carries an estimate', () => {
    const { out, r } = run(sse(delta({ content: 'abcdefgh' }), delta({ content: 'ij' }, 'stop'), '[DONE]'));
    const u = r.usage();
    expect(u).toEqual({ promptTokens: 12, completionTokens: 3, totalTokens: 15, estimated: true });
    expect(out.at(-2)).toMatchObject({ usage: { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 } });
  });

  it('without provider usage, hidden reasoning is counted and billed though never delivered (spec rule 6)', () => {
    // 50 reasoning deltas of 14 characters, under both field names providers use
    const thoughts = Array.from({ length: 50 }, (_, i) => delta({ [i % 2 ? 'reasoning' : 'reasoning_content']: `idea ${String(i).padStart(2, '0')} noted ` }));
    const r = rewriter(ctxFor('svc-deep'));
    const { out } = run(sse(...thoughts, delta({ content: 'ok' }), delta({}, 'stop'), '[DONE]'), r);
    expect(JSON.stringify(out)).not.toContain('noted');
    // 50 × 14 + 2 = 702 characters → 176 tokens (more than the 51 deltas that carried text)
    expect(r.usage()).toEqual({ promptTokens: 12, completionTokens: 176, totalTokens: 188, estimated: true });
    expect(out.at(-2)).toMatchObject({ usage: { prompt_tokens: 12, completion_tokens: 176, total_tokens: 188 } });
  });

  it('a stream ending without [DONE] is closed with the final chunk and [DONE]', () => {
    const { out, r } = run(sse(delta({ content: 'x' }, 'stop'), usageChunk));
    expect(out.at(-1)).toBe('[DONE]');
    expect(out.at(-2)).toMatchObject({ choices: [], usage: { total_tokens: 13 }, svc: { request_id: 'req-7' } });
    expect(r.completed).toBe(true);
  });

  it('reports the floor in the svc block of the final chunk', () => {
    const { out } = run(normal, rewriter(ctxFor('svc-deep', { max_tokens: 5 })));
    expect((out.at(-2) as { svc: unknown }).svc).toEqual({
      alias: 'svc-deep', request_id: 'req-7', max_tokens_floor_applied: true, requested_max_tokens: 5, effective_max_tokens: 8000,
    });
  });

  it.each([
    ['an error event', sse(delta({ content: 'a' }), { error: { message: 'provider overloaded sim-quick-1' } }, delta({ content: 'b' }), '[DONE]')],
    ['an invalid JSON event', sse(delta({ content: 'a' }), '{not json', delta({ content: 'b' }), '[DONE]')],
  ])('%s → one error envelope and no [DONE]', (_name, input) => {
    const { out, r } = run(input);
    expect(out).toHaveLength(2);
    expect(out[1]).toEqual({
      error: { message: 'The model provider did not deliver a response.', type: 'api_error', param: null, code: 'upstream_error', request_id: 'req-7' },
    });
    expect(out).not.toContain('[DONE]');
    expect(r.completed).toBe(false);
  });

  it('a stream that ends after its finish_reason but without [DONE] still closes properly (final chunk, [DONE])', () => {
    const { out, r } = run(sse(delta({ content: 'ab' }), delta({}, 'stop'), usageChunk));
    expect(out.at(-1)).toBe('[DONE]');
    expect((out.at(-2) as { usage: unknown }).usage).toEqual({ prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 });
    expect(r.completed).toBe(true);
  });

  it('a stream cut short (ended before any finish_reason) ends with the error envelope; delivered tokens are still counted', () => {
    const { out, r } = run(sse(delta({ content: 'abcdefgh' }), delta({ content: 'ijkl' })));
    expect(out).toHaveLength(3);
    expect(out[2]).toMatchObject({ error: { code: 'upstream_error', type: 'api_error', request_id: 'req-7' } });
    expect(out).not.toContain('[DONE]');
    expect(r.completed).toBe(false);
    expect(r.usage()).toMatchObject({ estimated: true });
    expect(r.usage().completionTokens).toBeGreaterThanOrEqual(2);
  });

  it('vendor members in a delta or a choice never reach the caller (the no-parse path steps aside)', () => {
    const input = sse(
      { ...base, choices: [{ index: 0, delta: { content: 'a', thinking: 'SECRET-1' }, finish_reason: null }] },
      { ...base, choices: [{ index: 0, delta: { content: 'b' }, finish_reason: null, served_by: 'SECRET-2' }] },
      '[DONE]',
    );
    const r = rewriter();
    const out = Buffer.concat([r.push(Buffer.from(input)), r.end()]).toString();
    expect(out).not.toContain('SECRET');
    expect(out).toContain('"content":"a"');
    expect(out).toContain('"content":"b"');
  });

  it('a last [DONE] without its blank line ends the stream once', () => {
    const { out, r } = run(sse(delta({ content: 'ab' }), delta({}, 'stop')) + 'data: [DONE]');
    expect(out.filter((e) => e === '[DONE]')).toHaveLength(1);
    expect(out.at(-1)).toBe('[DONE]');
    expect(r.completed).toBe(true);
  });

  it('end() after [DONE] emits nothing more, and later pushes are ignored', () => {
    const r = rewriter();
    const first = r.push(Buffer.from(normal)).toString();
    expect(events(first).at(-1)).toBe('[DONE]');
    expect(r.push(Buffer.from(sse(delta({ content: 'late' })))).length).toBe(0);
    expect(r.end().length).toBe(0);
    expect(r.end().length).toBe(0);
  });

  it('input cut at random boundaries gives the same output events', () => {
    const piece = fc.oneof(
      fc.string({ unit: fc.constantFrom('a', 'é', '漢', '😀', ' ', '"'), maxLength: 8 }).map((s) => delta({ content: s })),
      fc.string({ maxLength: 8 }).map((s) => delta({ reasoning_content: s })),
      fc.constant(delta({}, 'stop')),
      fc.constant(usageChunk),
    );
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 8 }), fc.boolean(), fc.array(fc.nat(), { maxLength: 12 }), (pieces, done, points) => {
        const bytes = Buffer.from(sse(...pieces, ...(done ? ['[DONE]'] : [])));
        const at = [...new Set(points.map((p) => p % (bytes.length + 1)))].sort((a, b) => a - b);
        const chunks = [...at, bytes.length].map((p, i, all) => bytes.subarray(i === 0 ? 0 : (all[i - 1] as number), p));
        const whole = run('', rewriter(), [bytes]);
        const split = run('', rewriter(), chunks);
        expect(split.out).toEqual(whole.out);
        expect(split.r.usage()).toEqual(whole.r.usage());
        // A stream that ends before [DONE] is complete only if a finish_reason came; otherwise it was cut short.
        const finished = done || pieces.some((p) => (p.choices[0] as { finish_reason?: unknown } | undefined)?.finish_reason === 'stop');
        if (finished) expect(whole.out.at(-1)).toBe('[DONE]');
        else expect((whole.out.at(-1) as any).error.code).toBe('upstream_error');
      }),
      { numRuns: 300 },
    );
  });
});
