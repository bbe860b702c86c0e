/** rewriteChatCompletion: id/model/svc rewrite, reasoning and vendor fields removed. */
import { describe, expect, it } from 'vitest';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { admitChat } from '../../sidecar/src/domain/chat-request.js';
import { rewriteChatCompletion } from '../../sidecar/src/domain/chat-response.js';
import type { InferenceContext } from '../../sidecar/src/domain/request-context.js';

const cfg = parseConfig(defaultConfig('svc'));
const catalog = new Catalog(cfg.models, cfg.brand);

function ctxFor(body: Record<string, unknown>): InferenceContext {
  const a = admitChat({ messages: [{ role: 'user', content: 'hi' }], ...body }, catalog, { defaultTemperature: 0.7 });
  if (!a.ok) throw new Error('refused');
  return a.ctx;
}

const provider = {
  id: 'chatcmpl-provider-123',
  object: 'chat.completion',
  created: 1_700_000_000,
  model: 'sim-deep-r1',
  system_fingerprint: 'fp_abc',
  provider: 'sim',
  service_tier: 'default',
  x_vendor: { a: 1 },
  choices: [
    {
      index: 0,
      message: { role: 'assistant', content: 'Hello!', reasoning_content: 'secret thoughts', reasoning: 'more', vendor_meta: 1, refusal: null },
      finish_reason: 'stop',
      logprobs: null,
      native_finish_reason: 'eos',
    },
  ],
  usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15, completion_tokens_details: { reasoning_tokens: 3 } },
};

function rewrite(raw: unknown, ctx = ctxFor({ model: 'svc-quick' }), brand = 'svc') {
  const r = rewriteChatCompletion(Buffer.from(typeof raw === 'string' ? raw : JSON.stringify(raw)), ctx, 'req-1', brand, 1_764_331_200);
  if (!r.ok) throw new Error('not ok');
  return { body: JSON.parse(String(r.body)) as Record<string, unknown>, usage: r.usage, text: String(r.body) };
}

describe('rewriteChatCompletion', () => {
  it('sets the request id, the alias and the svc block; keeps created', () => {
    const { body } = rewrite(provider);
    expect(body.id).toBe('req-1');
    expect(body.object).toBe('chat.completion');
    expect(body.model).toBe('svc-quick');
    expect(body.created).toBe(1_700_000_000);
    expect(body.svc).toEqual({ alias: 'svc-quick', request_id: 'req-1' });
  });

  it('a provider without created (or with a non-number): the request\'s start second', () => {
    const { created: _gone, ...noCreated } = provider;
    expect(rewrite(noCreated).body.created).toBe(1_764_331_200);
    expect(rewrite({ ...provider, created: '1700000000' }).body.created).toBe(1_764_331_200);
  });

  it('drops every top-level vendor field', () => {
    const { body, text } = rewrite(provider);
    expect(Object.keys(body).sort()).toEqual(['choices', 'created', 'id', 'model', 'object', 'svc', 'usage']);
    for (const leaked of ['fp_abc', 'sim-deep-r1', 'chatcmpl-provider-123', 'service_tier']) expect(text).not.toContain(leaked);
  });

  it('removes reasoning and vendor fields from messages and choices', () => {
    const { body, text } = rewrite(provider);
    expect(body.choices).toEqual([{ index: 0, message: { role: 'assistant', content: 'Hello!', refusal: null }, finish_reason: 'stop', logprobs: null }]);
    expect(text).not.toContain('secret thoughts');
    expect(text).not.toContain('reasoning');
  });

  it('keeps tool calls', () => {
    const tool_calls = [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } }];
    const { body } = rewrite({ choices: [{ message: { role: 'assistant', content: null, tool_calls }, finish_reason: 'tool_calls' }] });
    expect(body.choices).toEqual([{ index: 0, message: { role: 'assistant', content: null, tool_calls }, finish_reason: 'tool_calls' }]);
  });

  it('copies usage (only the standard counts)', () => {
    const { body, usage } = rewrite(provider);
    expect(body.usage).toEqual({ prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 });
    expect(usage).toEqual({ promptTokens: 10, completionTokens: 5, totalTokens: 15, estimated: false });
  });

  it('no or malformed usage → estimated by the gateway and reported in the body', () => {
    const ctx = ctxFor({ model: 'svc-quick' });
    expect(ctx.promptEstimate).toBe(2); // 'user' + 'hi' = 6 characters
    const absurd = [{ prompt_tokens: 1e20, completion_tokens: 5 }, { prompt_tokens: 5, completion_tokens: 2 ** 53 }, { prompt_tokens: 2_000_000_000 }];
    for (const u of [undefined, null, { prompt_tokens: -1 }, { prompt_tokens: 'x' }, ...absurd]) {
      const { body, usage } = rewrite({ ...provider, usage: u }, ctx);
      // completion: the returned message { role: 'assistant', content: 'Hello!', refusal: null } = 15 characters,
      // plus the hidden reasoning it was billed for though never delivered (spec rule 6),
      // 'secret thoughts' + 'more' = 19 characters: 34 characters → 9 tokens.
      expect(usage).toEqual({ promptTokens: 2, completionTokens: 9, totalTokens: 11, estimated: true });
      expect(body.usage).toEqual({ prompt_tokens: 2, completion_tokens: 9, total_tokens: 11 });
      expect(JSON.stringify(body)).not.toContain('secret thoughts');
    }
  });

  it('svc-deep without usage: an answer cut short while still reasoning is billed for its reasoning, as a stream would be', () => {
    const ctx = ctxFor({ model: 'svc-deep' });
    const choices = [{ index: 0, message: { role: 'assistant', content: null, reasoning_content: 'r'.repeat(391) }, finish_reason: 'length' }];
    const { body, usage } = rewrite({ choices }, ctx);
    // 'assistant' (9) + 391 reasoning characters = 400 → 100 tokens
    expect(usage).toEqual({ promptTokens: 2, completionTokens: 100, totalTokens: 102, estimated: true });
    expect(body.choices).toEqual([{ index: 0, message: { role: 'assistant', content: null }, finish_reason: 'length' }]);
  });

  it('the estimate takes the prompt from the request context and the completion from every returned message', () => {
    const ctx = ctxFor({ model: 'svc-core', messages: [{ role: 'user', content: 'x'.repeat(36) }] });
    expect(ctx.promptEstimate).toBe(10);
    const choices = [
      { index: 0, message: { role: 'assistant', content: 'y'.repeat(23) }, finish_reason: 'stop' },
      { index: 1, message: { role: 'assistant', content: 'z'.repeat(15) }, finish_reason: 'stop' },
    ];
    const { body, usage } = rewrite({ choices }, ctx);
    // 2 × 'assistant' (9) + 23 + 15 = 56 characters → 14 tokens
    expect(usage).toEqual({ promptTokens: 10, completionTokens: 14, totalTokens: 24, estimated: true });
    expect(body.usage).toEqual({ prompt_tokens: 10, completion_tokens: 14, total_tokens: 24 });
  });

  it('floor fields appear in the svc block only when the floor applied', () => {
    const raised = rewrite(provider, ctxFor({ model: 'svc-deep', max_tokens: 10 })).body.svc;
    expect(raised).toEqual({ alias: 'svc-deep', request_id: 'req-1', max_tokens_floor_applied: true, requested_max_tokens: 10, effective_max_tokens: 8000 });
    const absent = rewrite(provider, ctxFor({ model: 'svc-deep' })).body.svc;
    expect(absent).toMatchObject({ max_tokens_floor_applied: true, requested_max_tokens: null, effective_max_tokens: 8000 });
    expect(rewrite(provider, ctxFor({ model: 'svc-deep', max_tokens: 9000 })).body.svc).toEqual({ alias: 'svc-deep', request_id: 'req-1' });
  });

  it('the block is named after the brand', () => {
    const { body } = rewrite(provider, undefined, 'acme');
    expect(body.acme).toEqual({ alias: 'svc-quick', request_id: 'req-1' });
    expect(body).not.toHaveProperty('svc');
  });

  it.each([
    ['not JSON', 'upstream exploded'],
    ['empty', ''],
    ['an array', '[]'],
    ['no choices', JSON.stringify({ id: 'x', object: 'chat.completion' })],
    ['choices not an array', JSON.stringify({ choices: {} })],
    ['an error object', JSON.stringify({ error: { message: 'boom' } })],
  ])('%s → ok:false', (_name, raw) => {
    expect(rewriteChatCompletion(Buffer.from(raw), ctxFor({ model: 'svc-quick' }), 'r', 'svc', 1_764_331_200)).toEqual({ ok: false });
  });
});
