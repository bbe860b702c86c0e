import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { MAX_JSON_DEPTH, poisonedField, scanBody } from '../../sidecar/src/domain/json-guard.js';

const nested = (n: number) => Buffer.from(`${'['.repeat(n)}${']'.repeat(n)}`);

describe('scanBody: how deep a body nests', () => {
  const nestsDeeperThan = (bytes: Buffer, max: number) => scanBody(bytes, max).tooDeep;
  it('counts objects and arrays, not brackets inside strings', () => {
    expect(nestsDeeperThan(nested(MAX_JSON_DEPTH), MAX_JSON_DEPTH)).toBe(false);
    expect(nestsDeeperThan(nested(MAX_JSON_DEPTH + 1), MAX_JSON_DEPTH)).toBe(true);
    expect(nestsDeeperThan(Buffer.from(`{"a":"${'['.repeat(500)}"}`), 3)).toBe(false);
    expect(nestsDeeperThan(Buffer.from(`{"a":"\\"[[[[","b":{"c":[1]}}`), 3)).toBe(false);
    expect(nestsDeeperThan(Buffer.from(`{"a":"\\"","b":{"c":[[1]]}}`), 3)).toBe(true);
  });

  it('reads 10,000 levels without recursion', () => {
    expect(nestsDeeperThan(nested(10_000), MAX_JSON_DEPTH)).toBe(true);
  });
});

describe('scanBody: where the top-level members lie', () => {
  const valueAt = (bytes: Buffer, span: readonly [number, number]) => JSON.parse(bytes.subarray(span[0], span[1]).toString()) as unknown;
  // Keys as JSON.stringify writes them: escaped only where they must be (quote, backslash, control characters).
  const plainKey = fc.string({ unit: 'grapheme', maxLength: 10 }).filter((k) => !JSON.stringify(k).includes('\\'));

  /** JSON text with whitespace wherever JSON allows it (before commas and colons too, which JSON.stringify never writes). */
  const spaced = (v: unknown, ws: string): string => {
    if (Array.isArray(v)) return `[${ws}${v.map((x) => spaced(x, ws)).join(`${ws},${ws}`)}${ws}]`;
    if (typeof v === 'object' && v !== null) {
      return `{${ws}${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}${ws}:${ws}${spaced(x, ws)}`).join(`${ws},${ws}`)}${ws}}`;
    }
    return JSON.stringify(v);
  };

  it("finds each member's value exactly, whatever the spacing and however long its strings", () => {
    fc.assert(
      fc.property(fc.dictionary(plainKey, fc.jsonValue({ maxDepth: 3 }), { maxKeys: 6 }), fc.constantFrom('', ' ', '\n\t', ' \r\n '), (body, ws) => {
        const bytes = Buffer.from(`${ws}${spaced(body, ws)}${ws}`);
        const scan = scanBody(bytes, MAX_JSON_DEPTH, { members: true });
        expect(scan.tooDeep).toBe(false);
        expect([...(scan.members?.keys() ?? [])].sort()).toEqual(Object.keys(body).sort());
        // Compared as JSON reads it (-0 is written 0).
        for (const [k, span] of scan.members ?? []) {
          expect(valueAt(bytes, span)).toEqual(JSON.parse(JSON.stringify(body[k])));
          // No whitespace around the value.
          expect(bytes.subarray(span[0], span[1]).toString()).toBe(bytes.subarray(span[0], span[1]).toString().trim());
        }
      }),
      { numRuns: 500 },
    );
  });

  it('reads strings with escaped quotes and backslashes, short and long', () => {
    const long = `${'x'.repeat(100)}\\"${'y'.repeat(50)}\\\\`;
    const body = { a: 'say \\"hi\\"', b: long, c: ['\\', '\\"', { d: '}' }], e: 1.5e3, f: null, g: true };
    const bytes = Buffer.from(JSON.stringify(body));
    const members = scanBody(bytes, MAX_JSON_DEPTH, { members: true }).members!;
    for (const k of Object.keys(body)) expect(valueAt(bytes, members.get(k)!)).toEqual(body[k as keyof typeof body]);
  });

  it('keeps the last of a repeated key, as JSON.parse does', () => {
    const bytes = Buffer.from('{"messages":[1],"model":"m","messages":[2, 3]}');
    const span = scanBody(bytes, MAX_JSON_DEPTH, { members: true }).members!.get('messages')!;
    expect(bytes.subarray(span[0], span[1]).toString()).toBe('[2, 3]');
  });

  it('gives no members for a key written with an escape, a top level that is not an object, or when not asked', () => {
    expect(scanBody(Buffer.from('{"m\\u0065ssages":[1],"model":"m"}'), MAX_JSON_DEPTH, { members: true }).members).toBeNull();
    expect(scanBody(Buffer.from('[{"a":1}]'), MAX_JSON_DEPTH, { members: true }).members).toBeNull();
    expect(scanBody(Buffer.from(' "text" '), MAX_JSON_DEPTH, { members: true }).members).toBeNull();
    expect(scanBody(Buffer.from('{"a":1}'), MAX_JSON_DEPTH).members).toBeNull();
    expect(scanBody(Buffer.from('{}'), MAX_JSON_DEPTH, { members: true }).members?.size).toBe(0);
  });

  it('says too deep for the same bodies as the byte count did, members or not', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 8 }), fc.integer({ min: 1, max: 8 }), (v, max) => {
        const text = JSON.stringify(v) ?? 'null';
        const deepest = (x: unknown): number => (typeof x === 'object' && x !== null ? 1 + Math.max(0, ...Object.values(x).map(deepest)) : 0);
        expect(scanBody(Buffer.from(text), max, { members: true }).tooDeep).toBe(deepest(v) > max);
        expect(scanBody(Buffer.from(text), max).tooDeep).toBe(deepest(v) > max);
      }),
      { numRuns: 500 },
    );
  });
});

describe('scanBody: the members of the objects in one top-level array', () => {
  const valueAt = (bytes: Buffer, span: readonly [number, number]) => JSON.parse(bytes.subarray(span[0], span[1]).toString()) as unknown;
  const plainKey = fc.string({ unit: 'grapheme', maxLength: 8 }).filter((k) => !JSON.stringify(k).includes('\\'));

  it("finds each element's members, in order, whatever the spacing", () => {
    fc.assert(
      fc.property(fc.array(fc.dictionary(plainKey, fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }), { maxLength: 6 }), fc.constantFrom(undefined, 1), (data, indent) => {
        const bytes = Buffer.from(JSON.stringify({ model: 'm', data, usage: { n: 1 } }, null, indent));
        const { items, members } = scanBody(bytes, Number.MAX_SAFE_INTEGER, { itemsOf: 'data' });
        expect(members).toBeNull();
        expect(items).toHaveLength(data.length);
        items!.forEach((m, i) => {
          expect([...m.keys()].sort()).toEqual(Object.keys(data[i]!).sort());
          for (const [k, span] of m) expect(valueAt(bytes, span)).toEqual(JSON.parse(JSON.stringify(data[i]![k])));
        });
      }),
      { numRuns: 300 },
    );
  });

  it('reads the last of a repeated array, and gives none for an element that is not an object or a key with an escape', () => {
    const last = scanBody(Buffer.from('{"data":[{"a":1},{"a":2}],"data":[{"a":3}]}'), 99, { itemsOf: 'data' }).items!;
    expect(last).toHaveLength(1);
    expect(last[0]!.get('a')).toEqual([39, 40]); // the 3
    expect(scanBody(Buffer.from('{"data":[{"a":1},2]}'), 99, { itemsOf: 'data' }).items).toBeNull();
    expect(scanBody(Buffer.from('{"data":[{"a":1},"x"]}'), 99, { itemsOf: 'data' }).items).toBeNull();
    expect(scanBody(Buffer.from('{"data":[{"a":1},[1]]}'), 99, { itemsOf: 'data' }).items).toBeNull();
    expect(scanBody(Buffer.from('{"data":[{"\\u0061":1}]}'), 99, { itemsOf: 'data' }).items).toBeNull();
    expect(scanBody(Buffer.from('{"other":[{"a":1}]}'), 99, { itemsOf: 'data' }).items).toEqual([]);
    expect(scanBody(Buffer.from('{"data":[{"a":1}]}'), 99, { members: true }).items).toBeNull();
  });
});

describe('poisonedField', () => {
  it('names the top-level field holding a __proto__ key or constructor.prototype', () => {
    expect(poisonedField(JSON.parse('{"a":1,"__proto__":{"x":1}}'))).toBe('__proto__');
    expect(poisonedField(JSON.parse('{"messages":[{"role":"user","__proto__":{}}]}'))).toBe('messages');
    expect(poisonedField(JSON.parse('{"tools":[{"function":{"constructor":{"prototype":{}}}}]}'))).toBe('tools');
  });

  it('leaves ordinary bodies alone, a property named constructor included', () => {
    expect(poisonedField({ model: 'm', messages: [{ role: 'user', content: '__proto__' }] })).toBeNull();
    expect(poisonedField({ tools: [{ parameters: { properties: { constructor: { type: 'string' } } } }] })).toBeNull();
    expect(poisonedField([1, 2])).toBeNull();
  });
});

describe('mayBePoisoned: the byte pre-check before the walk', () => {
  it('is false for an ordinary body and true wherever a key could be spelled, escaped forms included', async () => {
    const { mayBePoisoned, poisonedField } = await import('../../sidecar/src/domain/json-guard.js');
    expect(mayBePoisoned(Buffer.from('{"model":"svc-core","messages":[{"role":"user","content":"hi"}]}'))).toBe(false);
    const escaped = '{"messages":[{"\\u005f_proto__":{"x":1}}]}';
    expect(mayBePoisoned(Buffer.from(escaped))).toBe(true);
    expect(poisonedField(JSON.parse(escaped))).toBe('messages');
    expect(mayBePoisoned(Buffer.from('{"tools":[{"constructor":{"prototype":1}}]}'))).toBe(true);
  });
});
