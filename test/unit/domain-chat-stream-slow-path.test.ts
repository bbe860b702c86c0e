/**
 * ChatStreamRewriter, the chunks the no-parse path steps aside from (odd choices,
 * vendor members, usage chunks, tool-call deltas, `created` that is not a plain
 * integer) and what the counted estimate and the end of a stream look like.
 */
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

function ctxFor(model: string): InferenceContext {
  const a = admitChat({ model, stream: true, messages: [{ role: 'user', content: 'hi' }] }, catalog, { defaultTemperature: 0.7 });
  if (!a.ok) throw new Error('refused');
  return a.ctx;
}

/** The request's start second, what the chunks say until the provider gives its own `created`. */
const STARTED = 1_764_331_200;
const PROMPT = 12;
const rewriter = () => new ChatStreamRewriter(ctxFor('svc-quick'), 'req-7', 'svc', PROMPT, STARTED);

const base = { id: 'chatcmpl-up', object: 'chat.completion.chunk', created: 1_700_000_000, model: 'sim-quick-1', system_fingerprint: 'fp' };
const { created: _created, ...noCreated } = base;
/** A plain delta chunk (the no-parse path takes it). */
const plain = (d: Record<string, unknown>, finish: string | null = null) => ({ ...base, choices: [{ index: 0, delta: d, finish_reason: finish }] });
/** The same with a vendor member in its choice: the full parse takes it. */
const vendor = (d: Record<string, unknown> | undefined, finish: string | null = null, top: Record<string, unknown> = base) => ({
  ...top,
  choices: [{ index: 0, ...(d === undefined ? {} : { delta: d }), finish_reason: finish, served_by: 'node-3' }],
});

const UPSTREAM_ERROR = {
  error: { message: 'The model provider did not deliver a response.', type: 'api_error', param: null, code: 'upstream_error', request_id: 'req-7' },
};

type Chunk = { id: string; object: string; created: unknown; model: string; choices: Array<Record<string, unknown>>; usage?: unknown };

function run(input: string, r = rewriter()): { out: unknown[]; r: ChatStreamRewriter } {
  return { out: events(r.push(Buffer.from(input)).toString() + r.end().toString()), r };
}

/** The delta chunks (neither the final usage chunk nor [DONE]). */
const deltaChunks = (out: unknown[]): Chunk[] => (out.filter((e) => e !== '[DONE]') as Chunk[]).filter((c) => c.choices.length > 0);
const estimate = (completionTokens: number) => ({ promptTokens: PROMPT, completionTokens, totalTokens: PROMPT + completionTokens, estimated: true });

describe('ChatStreamRewriter: what the full parse handles', () => {
  it('a choice with a vendor member is delivered cleaned, with the alias, the request id and the provider\'s created', () => {
    const { out, r } = run(sse(vendor({ role: 'assistant', content: 'Hi', thinking: 'x' }), vendor({}, 'stop'), '[DONE]'));
    expect(out).toHaveLength(4);
    expect(out.slice(0, 2)).toEqual([
      { id: 'req-7', object: 'chat.completion.chunk', created: 1_700_000_000, model: 'svc-quick', choices: [{ index: 0, delta: { role: 'assistant', content: 'Hi' }, finish_reason: null }] },
      { id: 'req-7', object: 'chat.completion.chunk', created: 1_700_000_000, model: 'svc-quick', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] },
    ]);
    expect(out.at(-1)).toBe('[DONE]');
    expect(r.completed).toBe(true);
  });

  it('`created` from parsed chunks: taken when a number, kept when missing or not a number, the request start until one comes', () => {
    const { out } = run(
      sse(
        vendor({ content: 'a' }, null, noCreated),
        vendor({ content: 'b' }, null, { ...base, created: '1700000001' }),
        vendor({ content: 'c' }, null, { ...base, created: 1_700_000_005 }),
        vendor({ content: 'd' }, null, noCreated),
        vendor({ content: 'e' }, null, { ...base, created: null }),
        vendor({}, 'stop', noCreated),
        '[DONE]',
      ),
    );
    const chunks = out.filter((e) => e !== '[DONE]') as Chunk[];
    expect(chunks.map((c) => c.created)).toEqual([STARTED, STARTED, 1_700_000_005, 1_700_000_005, 1_700_000_005, 1_700_000_005, 1_700_000_005]);
  });

  it('choices that are not objects are skipped; the other choices of the chunk are delivered', () => {
    const chunk = { ...base, choices: [null, 'text', 7, [], { index: 0, delta: { content: 'ok' }, finish_reason: null }] };
    const { out } = run(sse(chunk, plain({}, 'stop'), '[DONE]'));
    expect(deltaChunks(out)[0]!.choices).toEqual([{ index: 0, delta: { content: 'ok' }, finish_reason: null }]);
    expect(out.at(-1)).toBe('[DONE]');
  });

  it('a parsed choice\'s index: kept when a number, 0 when missing or not a number', () => {
    const chunk = {
      ...base,
      choices: [
        { index: 2, delta: { content: 'two' }, finish_reason: null, served_by: 'n' },
        { delta: { content: 'none' }, finish_reason: null },
        { index: '1', delta: { content: 'text' }, finish_reason: null },
      ],
    };
    const { out } = run(sse(chunk, plain({}, 'stop'), '[DONE]'));
    expect(deltaChunks(out)[0]!.choices).toEqual([
      { index: 2, delta: { content: 'two' }, finish_reason: null },
      { index: 0, delta: { content: 'none' }, finish_reason: null },
      { index: 0, delta: { content: 'text' }, finish_reason: null },
    ]);
  });

  it('a choice without a delta (or with a null one) is delivered with an empty delta; its finish_reason counts', () => {
    const { out, r } = run(sse(plain({ content: 'ab' }), { ...base, choices: [{ index: 0, delta: null, finish_reason: null, served_by: 'n' }] }, vendor(undefined, 'length')));
    expect(deltaChunks(out).map((c) => c.choices)).toEqual([
      [{ index: 0, delta: { content: 'ab' }, finish_reason: null }],
      [{ index: 0, delta: {}, finish_reason: 'length' }],
    ]);
    // The stream ended without [DONE] but after the finish_reason: closed properly.
    expect(out.at(-1)).toBe('[DONE]');
    expect(r.completed).toBe(true);
  });

  it('a parsed finish_reason completes the answer: a stream ending without [DONE] after it closes cleanly', () => {
    const { out, r } = run(sse(vendor({ content: 'abc' }), vendor({}, 'stop')));
    expect(out).toHaveLength(4);
    expect(out[2]).toMatchObject({ choices: [], usage: { prompt_tokens: PROMPT, completion_tokens: 1, total_tokens: PROMPT + 1 }, svc: { request_id: 'req-7' } });
    expect(out.at(-1)).toBe('[DONE]');
    expect(r.completed).toBe(true);
    expect(r.failedUpstream).toBe(false);
  });

  it('a parsed chunk without a finish_reason string leaves the answer unfinished: a stream ending there is cut short', () => {
    const { out, r } = run(sse(vendor({ content: 'abc' }), vendor({ content: 'd' }, 5 as unknown as string)));
    expect(out.at(-1)).toEqual(UPSTREAM_ERROR);
    expect(out).not.toContain('[DONE]');
    expect(r.failedUpstream).toBe(true);
  });

  it('chunks without choices (missing, not an array, empty) deliver nothing; their usage is still kept', () => {
    const usage = { prompt_tokens: 20, completion_tokens: 6, total_tokens: 26 };
    const { out, r } = run(
      sse(
        plain({ content: 'hello' }),
        { ...base, choices: null },
        { ...base, choices: {} },
        { ...base, choices: [] },
        plain({}, 'stop'),
        { ...base, usage },
        '[DONE]',
      ),
    );
    expect(out).toHaveLength(4);
    expect(deltaChunks(out)).toHaveLength(2);
    expect(out[2]).toMatchObject({ choices: [], usage });
    expect(r.usage()).toEqual({ promptTokens: 20, completionTokens: 6, totalTokens: 26, estimated: false });
  });

  it('the provider\'s usage is kept once given: later chunks without usage (or with a bogus one) do not erase it', () => {
    const usage = { prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 };
    const { out, r } = run(
      sse(plain({ content: 'hi' }), { ...plain({}, 'stop'), usage }, { ...base, choices: [] }, { ...base, choices: [], usage: { prompt_tokens: -3 } }, vendor({ content: '' })),
    );
    expect(r.usage()).toEqual({ promptTokens: 9, completionTokens: 4, totalTokens: 13, estimated: false });
    expect(out.at(-2)).toMatchObject({ choices: [], usage });
    expect(out.at(-1)).toBe('[DONE]');
  });
});

describe('ChatStreamRewriter: the estimate when the provider sends no usage', () => {
  it('plain chunks: each delta with text is at least one token (more deltas than characters / 4)', () => {
    const { out, r } = run(sse(...'abcdefgh'.split('').map((ch) => plain({ content: ch })), plain({}, 'stop'), '[DONE]'));
    expect(r.usage()).toEqual(estimate(8));
    expect(out.at(-2)).toMatchObject({ usage: { prompt_tokens: PROMPT, completion_tokens: 8, total_tokens: PROMPT + 8 } });
  });

  it('parsed chunks: each delta with text is at least one token', () => {
    const { r } = run(sse(...'abcdefg'.split('').map((ch) => vendor({ content: ch })), vendor({}, 'stop'), '[DONE]'));
    expect(r.usage()).toEqual(estimate(7));
  });

  it('parsed chunks: deltas without text (role only, empty content, finish) are not counted as tokens', () => {
    const { r } = run(sse(vendor({ role: 'assistant' }), vendor({ content: '' }), vendor({ content: 'abcd' }), vendor({ role: 'assistant', content: '' }), vendor({}, 'stop'), '[DONE]'));
    expect(r.usage()).toEqual(estimate(1));
  });

  it('parsed chunks: content and refusal characters are counted (4 to a token)', () => {
    const content = 'The answer to that is simple, really...'; // 39 characters
    const refusal = 'I cannot help with that request, I am afraid, sorry.'; // 52 characters
    expect([content.length, refusal.length]).toEqual([39, 52]);
    const { out, r } = run(sse(vendor({ content }), vendor({ refusal }), vendor({ content: 'x', refusal: 'yyy' }), vendor({}, 'stop'), '[DONE]'));
    // 39 + 52 + 4 = 95 characters → 24 tokens
    expect(r.usage()).toEqual(estimate(24));
    expect(deltaChunks(out).map((c) => c.choices[0]!.delta)).toEqual([{ content }, { refusal }, { content: 'x', refusal: 'yyy' }, {}]);
  });

  it('a provider whose created is -1 still gets whole chunks: every event parses and carries the head', () => {
    const odd = { ...base, created: -1 };
    const plainNoCreated = (d: Record<string, unknown>) => ({ ...noCreated, choices: [{ index: 0, delta: d, finish_reason: null }] });
    // a parsed chunk sets created to -1; the plain chunks after it carry none, so they keep it
    const { out } = run(sse(vendor({ content: 'a' }, null, odd), plainNoCreated({ content: 'b' }), plainNoCreated({ content: 'c' }), plain({}, 'stop'), '[DONE]'));
    const chunks = deltaChunks(out); // events() has parsed every event
    expect(chunks.map((c) => [c.id, c.object, c.created, c.model, c.choices[0]!.delta])).toEqual([
      ['req-7', 'chat.completion.chunk', -1, 'svc-quick', { content: 'a' }],
      ['req-7', 'chat.completion.chunk', -1, 'svc-quick', { content: 'b' }],
      ['req-7', 'chat.completion.chunk', -1, 'svc-quick', { content: 'c' }],
      ['req-7', 'chat.completion.chunk', 1_700_000_000, 'svc-quick', {}],
    ]);
    expect(out.at(-1)).toBe('[DONE]');
  });

  it('plain chunks count refusal characters as parsed ones do: the same stream, the same estimate either way', () => {
    const content = 'The answer to that is simple, really...'; // 39 characters
    const refusal = 'I cannot help with that request, I am afraid, sorry.'; // 52 characters
    const deltas = [{ content }, { refusal }, { content: 'x', refusal: 'yyy' }];
    const fast = run(sse(...deltas.map((d) => plain(d)), plain({}, 'stop'), '[DONE]'));
    const slow = run(sse(...deltas.map((d) => vendor(d)), vendor({}, 'stop'), '[DONE]'));
    // 39 + 52 + 4 = 95 characters → 24 tokens, whichever path read them
    expect(fast.r.usage()).toEqual(estimate(24));
    expect(slow.r.usage()).toEqual(estimate(24));
    expect(deltaChunks(fast.out).map((c) => c.choices[0]!.delta)).toEqual([...deltas, {}]);
    // a refusal alone, written by a provider that sends no usage, is billed
    expect(run(sse(plain({ refusal }), plain({}, 'stop'), '[DONE]')).r.usage()).toEqual(estimate(13));
  });

  it('parsed chunks: tool-call arguments are counted; odd tool calls are delivered as given and counted as nothing', () => {
    const args1 = '{"location": "Paris, France", '; // 30 characters
    const args2 = '"unit": "celsius", "days": 3}'; // 29 characters
    expect([args1.length, args2.length]).toEqual([30, 29]);
    const first = [{ index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather' } }];
    const odd = [null, 'x', { index: 1 }, { index: 2, function: 'f' }, { index: 3, function: { name: 'g', arguments: { a: 1 } } }];
    const { out, r } = run(
      sse(
        vendor({ role: 'assistant', tool_calls: first }),
        vendor({ tool_calls: [{ index: 0, function: { arguments: args1 } }] }),
        vendor({ tool_calls: odd }),
        vendor({ tool_calls: [{ index: 0, function: { arguments: args2 } }] }),
        vendor({ tool_calls: 'not a list' }),
        vendor({}, 'tool_calls'),
        '[DONE]',
      ),
    );
    // 59 characters in 2 deltas → 15 tokens
    expect(r.usage()).toEqual(estimate(15));
    const deltas = deltaChunks(out).map((c) => c.choices[0]!.delta);
    expect(deltas.slice(0, 3)).toEqual([{ role: 'assistant', tool_calls: first }, { tool_calls: [{ index: 0, function: { arguments: args1 } }] }, { tool_calls: odd }]);
    expect(out.at(-1)).toBe('[DONE]');
  });
});

describe('ChatStreamRewriter: the no-parse path and the end of a stream', () => {
  it('a plain chunk\'s choices reach the caller as the provider wrote them, logprobs included', () => {
    const logprobs = { content: [{ token: 'Hi', logprob: -0.25, bytes: [72, 105], top_logprobs: [] }] };
    const chunk = { ...base, choices: [{ index: 0, delta: { content: 'Hi' }, logprobs, finish_reason: null }] };
    const r = rewriter();
    const text = r.push(Buffer.from(sse(chunk))).toString();
    expect(text).toBe(`data: {"id":"req-7","object":"chat.completion.chunk","created":1700000000,"model":"svc-quick","choices":${JSON.stringify(chunk.choices)}}\n\n`);
  });

  it('events without data (comments, keep-alives, named events alone) are skipped', () => {
    const with_ = ': keep-alive\n\n' + sse(plain({ content: 'a' })) + 'event: ping\n\n: x\n\n' + sse(plain({ content: 'b' }), plain({}, 'stop')) + ': bye\n\n' + sse('[DONE]');
    const without = sse(plain({ content: 'a' }), plain({ content: 'b' }), plain({}, 'stop'), '[DONE]');
    const a = run(with_);
    expect(a.out).toEqual(run(without).out);
    expect(a.out).toHaveLength(5);
    expect(a.r.completed).toBe(true);
  });

  it('an event growing past the framer\'s limit ends the stream with the error envelope, and nothing more', () => {
    const r = rewriter();
    const first = r.push(Buffer.from(sse(plain({ content: 'ab' })))).toString();
    expect(events(first)).toHaveLength(1);
    const huge = Buffer.from(`data: {"choices":[{"delta":{"content":"${'a'.repeat(1024 * 1024 + 16)}`);
    expect(events(r.push(huge).toString())).toEqual([UPSTREAM_ERROR]);
    expect(r.failedUpstream).toBe(true);
    expect(r.ended).toBe(true);
    expect(r.push(Buffer.from('"}}]}\n\n' + sse(plain({}, 'stop'), '[DONE]'))).length).toBe(0);
    expect(r.end().length).toBe(0);
    expect(r.usage()).toEqual(estimate(1));
  });

  it('fail() after the final chunk and [DONE] (the gateway stopping late) emits nothing and changes nothing', () => {
    const r = rewriter();
    const out = events(r.push(Buffer.from(sse(plain({ content: 'ab' }), plain({}, 'stop'), '[DONE]'))).toString());
    expect(out.at(-1)).toBe('[DONE]');
    expect(r.fail()).toBe('');
    expect(r.completed).toBe(true);
    expect(r.failedUpstream).toBe(false);
    expect(r.end().length).toBe(0);
  });

  it('fail() after an error event emits no second error', () => {
    const r = rewriter();
    const out = events(r.push(Buffer.from(sse(plain({ content: 'ab' }), { error: { message: 'overloaded' } }))).toString());
    expect(out.at(-1)).toEqual(UPSTREAM_ERROR);
    expect(r.fail()).toBe('');
    expect(r.end().length).toBe(0);
    expect(r.failedUpstream).toBe(true);
  });

  it('fail() while the stream runs: one error envelope, then the end', () => {
    const r = rewriter();
    r.push(Buffer.from(sse(plain({ content: 'ab' }))));
    expect(events(r.fail())).toEqual([UPSTREAM_ERROR]);
    expect(r.fail()).toBe('');
    expect(r.push(Buffer.from(sse(plain({ content: 'cd' }), '[DONE]'))).length).toBe(0);
    expect(r.end().length).toBe(0);
    expect(r.completed).toBe(false);
  });
});
