import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeFacts, encodeFacts, settleInputOf, type SettlementFacts } from '../../sidecar/src/domain/billing/settlement-record.js';

/** The settlement's facts, recorded before the answer leaves and read back after a crash. */
const facts: SettlementFacts = {
  requestId: 'req-1',
  tenantId: 'ten_1',
  keyId: 'key_1',
  startedAt: Date.UTC(2026, 10, 30, 23, 59, 59, 500),
  now: Date.UTC(2026, 11, 1, 0, 0, 1),
  alias: 'svc-quick',
  internalModel: 'quick-model',
  promptTokens: 3,
  completionTokens: 2,
  totalTokens: 5,
  estimated: true,
  requestCount: 1,
  price: { inputPerMillion: 100_000, outputPerMillion: 500_000, perInput: 1000 },
  creditCheck: true,
  lease: { id: 'lease-1', amount: 4200 },
};

const arbFacts: fc.Arbitrary<SettlementFacts> = fc.record({
  requestId: fc.string({ minLength: 1 }),
  tenantId: fc.string({ minLength: 1 }),
  keyId: fc.option(fc.string(), { nil: null }),
  startedAt: fc.nat(),
  now: fc.nat(),
  alias: fc.string(),
  internalModel: fc.string(),
  promptTokens: fc.nat(),
  completionTokens: fc.nat(),
  totalTokens: fc.nat(),
  estimated: fc.boolean(),
  requestCount: fc.nat(),
  price: fc.record({ inputPerMillion: fc.nat(), outputPerMillion: fc.nat(), perInput: fc.nat() }),
  creditCheck: fc.boolean(),
  lease: fc.option(fc.record({ id: fc.string({ minLength: 1 }), amount: fc.nat() }), { nil: null }),
});

describe('settlement facts', () => {
  it('read back exactly as written, whatever the values (one line, no newline in it)', () => {
    fc.assert(
      fc.property(arbFacts, (f) => {
        const line = encodeFacts(f);
        expect(line).not.toContain('\n');
        expect(decodeFacts(line)).toEqual(f);
      }),
    );
  });

  it('the layout is fixed: a line an earlier version wrote still reads the same', () => {
    const line = '["s1","req-1","ten_1","key_1",1796083199500,1796083201000,"svc-quick","quick-model",3,2,5,1,1,100000,500000,1000,1,"lease-1",4200]';
    expect(encodeFacts(facts)).toBe(line);
    expect(decodeFacts(line)).toEqual(facts);
  });

  it.each([
    ['a torn line', '["s1","req-1","ten_1"'],
    ['another layout', '["s2","req-1","ten_1",null,1,1,"a","m",1,1,2,0,1,1,1,1,0,null,null]'],
    ['a negative token count', '["s1","req-1","ten_1",null,1,1,"a","m",-1,1,2,0,1,1,1,1,0,null,null]'],
    ['a fraction', '["s1","req-1","ten_1",null,1,1,"a","m",1.5,1,2,0,1,1,1,1,0,null,null]'],
    ['a missing field', '["s1","req-1","ten_1",null,1,1,"a","m",1,1,2,0,1,1,1,1,0,null]'],
    ['an object', '{"op":"settle"}'],
    ['a lease id without its amount', '["s1","req-1","ten_1",null,1,1,"a","m",1,1,2,0,1,1,1,1,0,"lease-1",null]'],
    ['a lease amount without its id', '["s1","req-1","ten_1",null,1,1,"a","m",1,1,2,0,1,1,1,1,0,null,5]'],
  ])('%s is not a record', (_, line) => {
    expect(decodeFacts(line)).toBeNull();
  });

  it('the settlement: the charge rounded up once, the period, day and usage time of the start, the ledger time of the end', () => {
    expect(settleInputOf(facts)).toEqual({
      lease: { id: 'lease-1', amount: 4200 },
      tenantId: 'ten_1',
      requestId: 'req-1',
      charge: 1002, // 3 × 0.1 + 2 × 0.5 = 1.3 → 2, plus 1,000 for the request
      creditCheck: true,
      period: '2026-11',
      day: '2026-11-30',
      now: facts.now,
      usage: {
        time: '2026-11-30T23:59:59.500Z',
        tenantId: 'ten_1',
        keyId: 'key_1',
        alias: 'svc-quick',
        internalModel: 'quick-model',
        promptTokens: 3,
        completionTokens: 2,
        totalTokens: 5,
        requestCount: 1,
        requestId: 'req-1',
        estimated: true,
      },
    });
    expect(settleInputOf({ ...facts, lease: null })).not.toHaveProperty('lease');
  });

  it('a cost no ledger could take is refused, not rounded', () => {
    expect(() => settleInputOf({ ...facts, promptTokens: Number.MAX_SAFE_INTEGER, price: { ...facts.price, inputPerMillion: 10_000_000 } })).toThrow(RangeError);
  });
});
