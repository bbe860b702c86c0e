import { describe, expect, it } from 'vitest';
import { MAX_JSON_DEPTH, nestsDeeperThan, poisonedField } from '../../sidecar/src/domain/json-guard.js';

const nested = (n: number) => Buffer.from(`${'['.repeat(n)}${']'.repeat(n)}`);

describe('nestsDeeperThan', () => {
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
