import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { upstreamBody } from '../../sidecar/src/domain/upstream-body.js';

describe('upstreamBody', () => {
  const members = ['messages', 'tools', 'input'];
  const other = fc.dictionary(fc.oneof(fc.string({ maxLength: 12 }), fc.constant('__proto__')).filter((k) => !members.includes(k) && k !== 'model'), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 });
  const named = fc.record(
    { messages: fc.jsonValue({ maxDepth: 3 }), tools: fc.oneof(fc.constant(null), fc.jsonValue({ maxDepth: 3 })), input: fc.oneof(fc.string(), fc.array(fc.string({ unit: 'binary' }))) },
    { requiredKeys: [] },
  );

  it('sizes the named members exactly as serialising each alone would, and sends the one serialisation', () => {
    fc.assert(
      fc.property(other, named, fc.subarray(members), fc.string({ unit: 'binary', maxLength: 20 }), (rest, picked, asked, model) => {
        const upstream = { ...rest, model, ...picked };
        const out = upstreamBody(upstream, asked);
        expect(out.bytes.toString()).toBe(JSON.stringify(upstream));
        const expected = asked.reduce((n, k) => {
          const v = (upstream as Record<string, unknown>)[k];
          return v === undefined ? n : n + Buffer.byteLength(JSON.stringify(v));
        }, 0);
        expect(out.memberBytes).toBe(expected);
      }),
      { numRuns: 1000 },
    );
  });

  it('keeps a member named __proto__ (an own property after JSON.parse) out of the prompt size', () => {
    const upstream = { ...(JSON.parse('{"__proto__":{"x":1},"model":"m","messages":["hi"]}') as Record<string, unknown>) };
    const out = upstreamBody(upstream, ['messages']);
    expect(out.bytes.toString()).toBe('{"__proto__":{"x":1},"model":"m","messages":["hi"]}');
    expect(out.memberBytes).toBe(Buffer.byteLength('["hi"]'));
  });

  it('counts multi-byte characters in bytes, and nothing for absent members', () => {
    const out = upstreamBody({ model: 'm', messages: [{ role: 'user', content: 'Grüezi 😀' }] }, ['messages', 'tools']);
    expect(out.memberBytes).toBe(Buffer.byteLength('[{"role":"user","content":"Grüezi 😀"}]'));
    expect(upstreamBody({ model: 'm' }, ['messages']).memberBytes).toBe(0);
    // An undefined member is left out of the JSON, so it takes no bytes and no separator either.
    expect(upstreamBody({ model: 'm', messages: undefined, tools: [1] }, ['messages', 'tools']).memberBytes).toBe(3);
  });
});
