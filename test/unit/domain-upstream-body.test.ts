import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { upstreamBody, type RawBody } from '../../sidecar/src/domain/upstream-body.js';
import { MAX_JSON_DEPTH, scanBody } from '../../sidecar/src/domain/json-guard.js';

/** The request as admission sees it: its bytes, its scan, what JSON.parse made of it. */
function rawOf(text: string | Buffer): RawBody | null {
  const bytes = Buffer.isBuffer(text) ? text : Buffer.from(text);
  const { members } = scanBody(bytes, MAX_JSON_DEPTH, { members: true });
  // A key written with an escape leaves no members: admission then passes no raw body.
  return members && { bytes, members, parsed: JSON.parse(bytes.toString()) as Record<string, unknown> };
}

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

  describe("with the caller's bytes", () => {
    it('sends the named members as the caller wrote them, after the rest, and sizes them by those bytes', () => {
      fc.assert(
        fc.property(other, named, fc.subarray(members), fc.string({ unit: 'binary', maxLength: 20 }), fc.integer({ min: 0, max: 2 }), (rest, picked, asked, model, indent) => {
          const raw = rawOf(JSON.stringify({ ...rest, model: 'alias', ...picked }, null, indent));
          fc.pre(raw !== null);
          // As admission builds it: the parsed request, its model replaced.
          const upstream = { ...raw.parsed, model };
          const out = upstreamBody(upstream, asked, raw);
          expect(JSON.parse(out.bytes.toString())).toEqual(JSON.parse(JSON.stringify(upstream)));
          const present = asked.filter((k) => Object.hasOwn(picked, k));
          const copied = present.reduce((n, k) => n + raw.members.get(k)![1] - raw.members.get(k)![0], 0);
          if (present.length === 0) expect(out.bytes.toString()).toBe(JSON.stringify(upstream));
          else {
            expect(out.memberBytes).toBe(copied);
            for (const k of present) {
              const [a, b] = raw.members.get(k)!;
              expect(out.bytes.includes(Buffer.concat([Buffer.from(`${JSON.stringify(k)}:`), raw.bytes.subarray(a, b)]))).toBe(true);
            }
          }
        }),
        { numRuns: 1000 },
      );
    });

    it("keeps the caller's escapes and spacing inside the messages", () => {
      const text = '{ "model" : "alias", "messages" : [ {"role":"user", "content":"caf\\u00e9 \\"x\\""} ] }';
      const raw = rawOf(text)!;
      const out = upstreamBody({ ...raw.parsed, model: 'internal', temperature: 1 }, ['messages'], raw);
      expect(out.bytes.toString()).toBe('{"model":"internal","temperature":1,"messages":[ {"role":"user", "content":"caf\\u00e9 \\"x\\""} ]}');
      expect(out.memberBytes).toBe(Buffer.byteLength('[ {"role":"user", "content":"caf\\u00e9 \\"x\\""} ]'));
    });

    it('writes valid JSON when nothing but the named members goes up', () => {
      const raw = rawOf('{"messages":["hi"],"model":"alias"}')!;
      const { model: _, ...messagesOnly } = raw.parsed;
      expect(upstreamBody(messagesOnly, ['messages'], raw).bytes.toString()).toBe('{"messages":["hi"]}');
    });

    it('serialises a member that does not go up as the caller sent it, and a request that is not valid UTF-8', () => {
      const raw = rawOf('{"model":"alias","messages":[{"role":"user","content":"hi"}],"tools":[1]}')!;
      const changed = { ...raw.parsed, model: 'internal', messages: [{ role: 'user', content: 'other' }] };
      expect(upstreamBody(changed, ['messages', 'tools'], raw).bytes.toString()).toBe(JSON.stringify(changed));
      const bad = rawOf(Buffer.concat([Buffer.from('{"model":"alias","messages":[{"role":"user","content":"a'), Buffer.from([0xff, 0xfe]), Buffer.from('"}]}')]))!;
      const up = { ...bad.parsed, model: 'internal' };
      const out = upstreamBody(up, ['messages'], bad);
      expect(out.bytes.toString()).toBe(JSON.stringify(up));
      expect(out.bytes.includes(Buffer.from([0xff]))).toBe(false);
    });
  });
});
