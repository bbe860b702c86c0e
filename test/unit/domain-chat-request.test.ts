/** admitChat: validation, upstream rewrite, stream options and the svc-deep floor. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { admitChat } from '../../sidecar/src/domain/chat-request.js';
import type { Admission, InferenceContext } from '../../sidecar/src/domain/request-context.js';

const cfg = parseConfig(defaultConfig('svc'));
const catalog = new Catalog(cfg.models, cfg.brand);
const policy = { defaultTemperature: 0.7 };
const messages = [{ role: 'user', content: 'Hello there, how are you?' }];

function admit(body: Record<string, unknown>): { upstream: Record<string, unknown>; ctx: InferenceContext } {
  const a = admitChat({ model: 'svc-quick', messages, ...body }, catalog, policy);
  if (!a.ok) throw new Error(`refused: ${a.error.message}`);
  return { upstream: JSON.parse(a.upstreamBody.toString()) as Record<string, unknown>, ctx: a.ctx };
}

function refusal(body: unknown): { code: string | null; param: string | null; message: string } {
  const a: Admission = admitChat(body, catalog, policy);
  if (a.ok) throw new Error('expected a refusal');
  return { code: a.error.entry.code, param: a.error.param, message: a.error.message };
}

describe('upstream body', () => {
  it('rewrites the model to the internal name and keeps the rest', () => {
    const { upstream, ctx } = admit({ model: 'svc-core-2026-08', user: 'u1', top_p: 0.5 });
    expect(upstream).toMatchObject({ model: 'sim-core-1', messages, user: 'u1', top_p: 0.5, max_tokens: 4096 });
    expect(ctx).toMatchObject({
      endpoint: 'chat', stream: false, requestCount: 1, floor: null, maxTokens: 4096,
      promptBytes: 55, // Buffer.byteLength('[{"role":"user","content":"Hello there, how are you?"}]')
      messageCount: 1,
    });
    expect(ctx.resolved.alias).toBe('svc-core-2026-08');
  });

  it('promptBytes is the UTF-8 size of the messages plus the tools; messageCount counts messages', () => {
    const two = [{ role: 'user', content: 'héllo €' }, { role: 'assistant', content: 'hi' }];
    const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }];
    const plain = admit({ messages: two }).ctx;
    // '[{"role":"user","content":"héllo €"},{"role":"assistant","content":"hi"}]': 73 characters, é is 2 bytes and € 3.
    expect(plain.promptBytes).toBe(76);
    expect(plain.messageCount).toBe(2);
    // '[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}]' is 92 bytes.
    expect(admit({ messages: two, tools }).ctx.promptBytes).toBe(76 + 92);
  });

  it('sets the default temperature only when absent', () => {
    expect(admit({}).upstream.temperature).toBe(0.7);
    expect(admit({ temperature: null }).upstream.temperature).toBe(0.7);
    expect(admit({ temperature: 0 }).upstream.temperature).toBe(0);
    expect(admit({ temperature: 1.3 }).upstream.temperature).toBe(1.3);
    const other = admitChat({ model: 'svc-quick', messages }, catalog, { defaultTemperature: 0.2 });
    expect(other.ok && JSON.parse(other.upstreamBody.toString()).temperature).toBe(0.2);
  });

  it('a stream always asks for usage, merged into the caller stream_options', () => {
    expect(admit({ stream: true }).upstream.stream_options).toEqual({ include_usage: true });
    expect(admit({ stream: true, stream_options: { include_usage: false, x: 1 } }).upstream.stream_options).toEqual({ include_usage: true, x: 1 });
    expect(admit({ stream: true }).ctx.stream).toBe(true);
  });

  it('a non-stream request has no stream_options upstream', () => {
    expect(admit({ stream_options: { include_usage: true } }).upstream).not.toHaveProperty('stream_options');
    expect(admit({ stream: false, stream_options: {} }).upstream).not.toHaveProperty('stream_options');
  });

  it('passes tools and tool_choice through unchanged', () => {
    const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }];
    const tool_choice = { type: 'function', function: { name: 'f' } };
    expect(admit({ tools, tool_choice }).upstream).toMatchObject({ tools, tool_choice });
    expect(admit({ tools, tool_choice: 'auto' }).upstream.tool_choice).toBe('auto');
  });

  it('estimates the prompt above zero', () => {
    expect(admit({}).ctx.promptEstimate).toBeGreaterThan(0);
    expect(admit({ messages: [{ role: 'user', content: '' }] }).ctx.promptEstimate).toBe(1);
    expect(admit({ messages: [{ role: 'user', content: 'x'.repeat(396) }] }).ctx.promptEstimate).toBe(100); // + 'user'
  });
});

describe('svc-deep max_tokens floor', () => {
  it('no max_tokens: raised to 8000 with requested null', () => {
    const { upstream, ctx } = admit({ model: 'svc-deep' });
    expect(upstream.max_tokens).toBe(8000);
    expect(upstream).not.toHaveProperty('max_completion_tokens');
    expect(ctx.floor).toEqual({ requested: null, effective: 8000 });
    expect(ctx.maxTokens).toBe(8000);
  });

  it('below the floor: raised', () => {
    const { upstream, ctx } = admit({ model: 'svc-deep-2026-08', max_tokens: 100 });
    expect(upstream.max_tokens).toBe(8000);
    expect(ctx.floor).toEqual({ requested: 100, effective: 8000 });
  });

  it('at or above the floor: untouched, floor null', () => {
    for (const n of [8000, 12000]) {
      const { upstream, ctx } = admit({ model: 'svc-deep', max_tokens: n });
      expect(upstream.max_tokens).toBe(n);
      expect(ctx.floor).toBeNull();
      expect(ctx.maxTokens).toBe(n);
    }
  });

  it('max_completion_tokens is handled the same and sent under its own name', () => {
    const low = admit({ model: 'svc-deep', max_completion_tokens: 50 });
    expect(low.upstream.max_completion_tokens).toBe(8000);
    expect(low.upstream).not.toHaveProperty('max_tokens');
    expect(low.ctx.floor).toEqual({ requested: 50, effective: 8000 });
    const high = admit({ model: 'svc-deep', max_completion_tokens: 9000 });
    expect(high.upstream.max_completion_tokens).toBe(9000);
    expect(high.ctx.floor).toBeNull();
  });

  it('both fields given: max_completion_tokens decides (the current field); both go up with the effective cap', () => {
    const low = admit({ model: 'svc-deep', max_tokens: 9000, max_completion_tokens: 10 });
    expect(low.ctx.floor).toEqual({ requested: 10, effective: 8000 });
    expect(low.ctx.maxTokens).toBe(8000);
    expect(low.upstream).toMatchObject({ max_tokens: 8000, max_completion_tokens: 8000 });
    const high = admit({ model: 'svc-deep', max_tokens: 10, max_completion_tokens: 9000 });
    expect(high.ctx.floor).toBeNull();
    expect(high.ctx.maxTokens).toBe(9000);
    expect(high.upstream).toMatchObject({ max_tokens: 9000, max_completion_tokens: 9000 });
    const core = admit({ model: 'svc-core', max_tokens: 300, max_completion_tokens: 100 });
    expect(core.ctx.maxTokens).toBe(100);
    expect(core.upstream).toMatchObject({ max_tokens: 100, max_completion_tokens: 100 });
  });

  it('svc-deep at or above the floor keeps the caller cap, not its 32768 output cap', () => {
    const { upstream, ctx } = admit({ model: 'svc-deep', max_tokens: 20000 });
    expect(upstream.max_tokens).toBe(20000);
    expect(ctx.maxTokens).toBe(20000);
    expect(ctx.resolved.maxOutputTokens).toBe(32768);
  });

  it('quick and core are never raised: the caller cap is kept; without one, max_tokens = maxOutputTokens (4096)', () => {
    for (const model of ['svc-quick', 'svc-core', 'svc-core-2026-08']) {
      const none = admit({ model });
      expect(none.upstream.max_tokens).toBe(4096);
      expect(none.upstream).not.toHaveProperty('max_completion_tokens');
      expect(none.ctx.maxTokens).toBe(4096);
      expect(none.ctx.floor).toBeNull();

      const small = admit({ model, max_tokens: 5 });
      expect(small.upstream.max_tokens).toBe(5);
      expect(small.ctx.maxTokens).toBe(5);
      expect(small.ctx.floor).toBeNull();

      const mct = admit({ model, max_completion_tokens: 7 });
      expect(mct.upstream.max_completion_tokens).toBe(7);
      expect(mct.upstream).not.toHaveProperty('max_tokens');
      expect(mct.ctx.maxTokens).toBe(7);
      expect(mct.ctx.floor).toBeNull();
    }
  });
});

describe('validation', () => {
  const cases: [string, Record<string, unknown>, string][] = [
    ['missing model', { model: undefined }, 'model'],
    ['non-string model', { model: 7 }, 'model'],
    ['missing messages', { messages: undefined }, 'messages'],
    ['empty messages', { messages: [] }, 'messages'],
    ['message not an object', { messages: ['hi'] }, 'messages[0]'],
    ['bad role', { messages: [{ role: 'user', content: 'a' }, { role: 'wizard', content: 'b' }] }, 'messages[1].role'],
    ['bad content', { messages: [{ role: 'user', content: 3 }] }, 'messages[0].content'],
    ['null user content', { messages: [{ role: 'user', content: null }] }, 'messages[0].content'],
    ['max_tokens zero', { max_tokens: 0 }, 'max_tokens'],
    ['max_tokens fraction', { max_tokens: 1.5 }, 'max_tokens'],
    ['max_completion_tokens string', { max_completion_tokens: '10' }, 'max_completion_tokens'],
    ['max_tokens above the limit', { max_tokens: 1_000_001 }, 'max_tokens'],
    ['max_tokens beyond safe integers', { max_tokens: 1e300 }, 'max_tokens'],
    ['max_completion_tokens above the limit', { max_completion_tokens: 2 ** 53 }, 'max_completion_tokens'],
    ['temperature too high', { temperature: 2.5 }, 'temperature'],
    ['temperature string', { temperature: '1' }, 'temperature'],
    ['stream string', { stream: 'yes' }, 'stream'],
    ['stream_options array', { stream_options: [] }, 'stream_options'],
    ['tools object', { tools: {} }, 'tools'],
    ['tool_choice number', { tool_choice: 1 }, 'tool_choice'],
    ['n = 2', { n: 2 }, 'n'],
  ];
  it.each(cases)('%s → invalid_request with its param', (_name, over, param) => {
    const r = refusal({ model: 'svc-quick', messages, ...over });
    expect(r.code).toBe('invalid_request');
    expect(r.param).toBe(param);
  });

  it('max_tokens at the limit is accepted', () => {
    expect(() => admit({ model: 'svc-quick', messages, max_tokens: 1_000_000 })).not.toThrow();
  });

  it('a non-object body → invalid_request param body', () => {
    for (const body of [null, [], 'x', 3]) expect(refusal(body)).toMatchObject({ code: 'invalid_request', param: 'body' });
  });

  it('an assistant message may have null content', () => {
    expect(() => admit({ messages: [...messages, { role: 'assistant', content: null, tool_calls: [] }] })).not.toThrow();
  });

  it('unknown and internal model names get SRV_001 listing chat aliases only', () => {
    for (const model of ['svc-nope', 'sim-quick-1']) {
      const r = refusal({ model, messages });
      expect(r.code).toBe('SRV_001');
      expect(r.message).toContain('svc-quick-2026-08');
      expect(r.message).not.toContain('svc-embed');
      expect(r.message).not.toContain('sim-');
    }
    expect(refusal({ model: 'svc-embed', messages }).message).toContain('/embeddings');
  });

  it('no error message ever contains the offending value', () => {
    const fields = ['model', 'messages', 'role', 'content', 'max_tokens', 'max_completion_tokens', 'temperature', 'stream', 'stream_options', 'tools', 'n'] as const;
    fc.assert(
      fc.property(fc.constantFrom(...fields), fc.string({ minLength: 1 }), (field, s) => {
        const value = `⟦${s}⟧`; // delimited so it cannot coincide with fixed text
        const body: Record<string, unknown> = { model: 'svc-deep', messages: [{ role: 'user', content: 'hi' }] };
        if (field === 'role' || field === 'content') body.messages = [{ role: field === 'role' ? value : 'user', content: field === 'content' ? { v: value } : 'x' }];
        else if (field === 'messages') body.messages = [value];
        else body[field] = value;
        const a = admitChat(body, catalog, policy);
        return !a.ok && !a.error.message.includes(value) && !a.error.message.includes(`${s}⟧`);
      }),
      { numRuns: 300 },
    );
  });
});
