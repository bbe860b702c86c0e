/** admitBody: what goes up unchanged leaves as the caller's own bytes (large requests), everything else serialised once. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { admitBody } from '../../sidecar/src/domain/admission.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { admitChat } from '../../sidecar/src/domain/chat-request.js';
import { COPY_MIN_BYTES } from '../../sidecar/src/domain/upstream-body.js';

const cfg = parseConfig(defaultConfig('svc'));
const catalog = new Catalog(cfg.models, 'svc');
const policy = { catalog, defaultTemperature: 0.7, maxEmbeddingInputs: 256, maxRequestBytes: 1 << 20 };

function admitted(endpoint: 'chat' | 'embeddings', text: string) {
  const a = admitBody(endpoint, 'POST', Buffer.from(text), policy);
  if (!a.ok) throw new Error(`refused: ${a.error.message}`);
  return a;
}

/** A conversation long enough to be copied, written by hand: spaces, escapes, key order of its own. */
const longChat = (turns: number) =>
  `{ "messages" : [ ${Array.from({ length: turns }, (_, i) => `{"content": "Gr\\u00fcezi, turn ${i}: ${'z'.repeat(80)} \\"quoted\\"", "role" : "${i % 2 ? 'assistant' : 'user'}"}`).join(' ,\n ')} ] , "model" : "svc-core", "user": "u1" }`;

describe('admitBody with a large request', () => {
  it("sends the messages as the caller's bytes and prices them by those bytes", () => {
    const text = longChat(8);
    expect(Buffer.byteLength(text)).toBeGreaterThanOrEqual(COPY_MIN_BYTES);
    const a = admitted('chat', text);
    const sent = a.upstreamBody.toString();
    const messages = text.slice(text.indexOf('['), text.lastIndexOf(']') + 1);
    expect(sent).toContain(`"messages":${messages}`);
    expect(a.ctx.promptBytes).toBe(Buffer.byteLength(messages));
    // The same request as the serialising path builds it, member for member.
    const serialised = admitChat(JSON.parse(text), catalog, { defaultTemperature: 0.7 });
    if (!serialised.ok) throw new Error('refused');
    expect(JSON.parse(sent)).toEqual(JSON.parse(serialised.upstreamBody.toString()));
    expect(JSON.parse(sent)).toMatchObject({ model: 'sim-core-1', temperature: 0.7, user: 'u1' });
  });

  it('matches the serialising path for any conversation, whatever its size and text', () => {
    const message = fc.record({ role: fc.constantFrom('user', 'assistant', 'system'), content: fc.string({ unit: 'binary', maxLength: 300 }) });
    fc.assert(
      fc.property(fc.array(message, { minLength: 1, maxLength: 12 }), fc.boolean(), fc.constantFrom(undefined, 2), (messages, stream, indent) => {
        const text = JSON.stringify({ model: 'svc-core', messages, stream, tools: stream ? [{ type: 'function', function: { name: 'f' } }] : undefined }, null, indent);
        const a = admitted('chat', text);
        const b = admitChat(JSON.parse(text), catalog, { defaultTemperature: 0.7 });
        if (!b.ok) throw new Error('refused');
        expect(JSON.parse(a.upstreamBody.toString())).toEqual(JSON.parse(b.upstreamBody.toString()));
        expect(a.ctx).toEqual(indent === undefined ? b.ctx : { ...b.ctx, promptBytes: a.ctx.promptBytes });
        expect(a.ctx.promptBytes).toBeGreaterThanOrEqual(b.ctx.promptBytes);
      }),
      { numRuns: 300 },
    );
  });

  it("sends a long embeddings input as the caller's bytes", () => {
    const input = Array.from({ length: 12 }, (_, i) => `caf\\u00e9 number ${i} ${'w'.repeat(60)}`);
    const text = `{"model":"svc-embed","input":[ ${input.map((s) => `"${s}"`).join(', ')} ]}`;
    const a = admitted('embeddings', text);
    expect(a.upstreamBody.toString()).toContain(`"input":[ ${input.map((s) => `"${s}"`).join(', ')} ]`);
    expect(JSON.parse(a.upstreamBody.toString()).model).not.toBe('svc-embed');
  });
});

describe('admitBody with a small request', () => {
  it('serialises it whole, in its own order', () => {
    const text = '{"messages":[{"role":"user","content":"caf\\u00e9"}],"model":"svc-core"}';
    expect(Buffer.byteLength(text)).toBeLessThan(COPY_MIN_BYTES);
    expect(admitted('chat', text).upstreamBody.toString()).toBe('{"messages":[{"role":"user","content":"café"}],"model":"sim-core-1","temperature":0.7,"max_tokens":4096}');
  });
});

describe('admitBody with a request that is not valid UTF-8', () => {
  it('serialises it (the invalid byte goes up as U+FFFD, never raw)', () => {
    const [head] = longChat(8).split('"u1"');
    const body = Buffer.concat([Buffer.from(`${head}"`), Buffer.from([0xc3]), Buffer.from('" }')]);
    const a = admitBody('chat', 'POST', body, policy);
    if (!a.ok) throw new Error(`refused: ${a.error.message}`);
    expect(a.upstreamBody.includes(Buffer.from([0xc3, 0x22]))).toBe(false);
    expect(JSON.parse(a.upstreamBody.toString()).user).toBe('\ufffd');
  });
});
