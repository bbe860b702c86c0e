import { describe, expect, it } from 'vitest';
import { capRefusal, maxCompletionTokensWithin } from '../../sidecar/src/domain/billing/cap-refusal.js';
import { costOf } from '../../sidecar/src/domain/billing/pricing.js';
import type { InferenceContext } from '../../sidecar/src/domain/request-context.js';

const price = { inputPerMillion: 100_000, outputPerMillion: 400_000, perInput: 0 };

describe('maxCompletionTokensWithin', () => {
  it('is the largest completion whose cost, prompt included, fits the budget', () => {
    for (const budget of [1, 27, 100, 955, 12_345]) {
      const m = maxCompletionTokensWithin(budget, price, 70, 1);
      if (m >= 0) expect(costOf(price, { promptTokens: 70, completionTokens: m }, 1)).toBeLessThanOrEqual(budget);
      expect(costOf(price, { promptTokens: 70, completionTokens: m + 1 }, 1)).toBeGreaterThan(budget);
    }
  });

  it('is negative when the prompt alone does not fit', () => {
    expect(maxCompletionTokensWithin(1, { ...price, inputPerMillion: 10_000_000 }, 70, 1)).toBe(-1);
  });

  it('deducts the per-input price of every input before the tokens', () => {
    const perInput = { inputPerMillion: 1_000_000, outputPerMillion: 2_000_000, perInput: 100 };
    // (1,000,000 - 2 x 100) x 1e6 - 1,000 x 1e6 = 998,800e6 of room; 2e6 per completion token
    expect(maxCompletionTokensWithin(1_000_000, perInput, 1_000, 2)).toBe(499_400);
    for (const [budget, count] of [[1_000, 1], [5_000, 3], [77_777, 7], [1_000_000, 2]] as const) {
      const m = maxCompletionTokensWithin(budget, perInput, 120, count);
      expect(costOf(perInput, { promptTokens: 120, completionTokens: m }, count)).toBeLessThanOrEqual(budget);
      expect(costOf(perInput, { promptTokens: 120, completionTokens: m + 1 }, count)).toBeGreaterThan(budget);
    }
    // the per-input price alone over the budget: nothing fits
    expect(maxCompletionTokensWithin(250, perInput, 0, 3)).toBe(-1);
  });

  it('is 0, not negative, when the prompt uses the budget exactly', () => {
    const exact = { inputPerMillion: 1_000_000, outputPerMillion: 1_000_000, perInput: 0 };
    expect(maxCompletionTokensWithin(1_000, exact, 1_000, 1)).toBe(0);
    expect(maxCompletionTokensWithin(999, exact, 1_000, 1)).toBe(-1);
  });

  it('is unbounded (the largest safe integer) when output is free or the budget is huge', () => {
    expect(maxCompletionTokensWithin(10, { ...price, outputPerMillion: 0 }, 70, 1)).toBe(Number.MAX_SAFE_INTEGER);
    expect(maxCompletionTokensWithin(Number.MAX_SAFE_INTEGER, { inputPerMillion: 1, outputPerMillion: 1, perInput: 0 }, 1, 1)).toBe(
      Number.MAX_SAFE_INTEGER,
    );
  });
});

describe('capRefusal', () => {
  const ctx = { endpoint: 'chat', requestCount: 1, resolved: { maxTokensFloor: null } } as unknown as InferenceContext;
  const worst = { promptTokens: 70, completionTokens: 4096, cost: 1646 };

  it('nothing left: spend_cap_exceeded', () => {
    expect(capRefusal(0, price, ctx, worst, 'CHF').entry.code).toBe('spend_cap_exceeded');
    expect(capRefusal(-5, price, ctx, worst, 'CHF').entry.code).toBe('spend_cap_exceeded');
  });

  it('something left: a 400 naming max_tokens, with what is left and what would be served', () => {
    const e = capRefusal(100, price, ctx, worst, 'CHF');
    expect(e.entry.status).toBe(400);
    expect(e.param).toBe('max_tokens');
    expect(e.message).toContain('Only 100 micro-units (CHF)');
    expect(e.message).toContain(`at most ${maxCompletionTokensWithin(100, price, 70, 1)} would be served`);
  });

  it('a floor above what fits, or embeddings: says what would help instead', () => {
    const deep = { ...ctx, resolved: { maxTokensFloor: 8000 } } as unknown as InferenceContext;
    const e = capRefusal(100, price, deep, worst, 'CHF');
    expect([e.entry.status, e.param]).toEqual([400, 'messages']);
    expect(e.message).toContain('(max_tokens 8000) does not fit');
    const emb = capRefusal(100, price, { ...ctx, endpoint: 'embeddings' } as InferenceContext, worst, 'CHF');
    expect([emb.entry.status, emb.param]).toEqual([400, 'input']);
    expect(emb.message).toContain('Only 100 micro-units (CHF)');
    expect(emb.message).toContain('fewer input strings would be served');
  });

  it('a floor that fits exactly is still served: max_tokens named, at the floor', () => {
    const fits = maxCompletionTokensWithin(100, price, 70, 1);
    const atFloor = { ...ctx, resolved: { maxTokensFloor: fits } } as unknown as InferenceContext;
    const e = capRefusal(100, price, atFloor, worst, 'CHF');
    expect(e.param).toBe('max_tokens');
    expect(e.message).toContain(`at most ${fits} would be served`);
    const above = { ...ctx, resolved: { maxTokensFloor: fits + 1 } } as unknown as InferenceContext;
    expect(capRefusal(100, price, above, worst, 'CHF').param).toBe('messages');
  });
});
