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
    expect(capRefusal(100, price, deep, worst, 'CHF').param).toBe('messages');
    expect(capRefusal(100, price, { ...ctx, endpoint: 'embeddings' } as InferenceContext, worst, 'CHF').param).toBe('input');
  });
});
