/** Pricing: costOf (micro-units, rounded up once, BigInt), worstCase (the credit hold basis), UTC calendar keys. */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import type { Price } from '../../sidecar/src/config/schema.js';
import { dayOf, minuteOf, periodOf, costOf, worstCase } from '../../sidecar/src/domain/billing/pricing.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { admitChat } from '../../sidecar/src/domain/chat-request.js';
import { admitEmbeddings } from '../../sidecar/src/domain/embeddings-request.js';
import type { InferenceContext } from '../../sidecar/src/domain/request-context.js';

const cfg = parseConfig(defaultConfig('svc'));
const catalog = new Catalog(cfg.models, cfg.brand);
const priceOf = (model: string): Price => {
  const p = cfg.billing.prices[model];
  if (!p) throw new Error(`no price for ${model}`);
  return p;
};
const price = (over: Partial<Price>): Price => ({ inputPerMillion: 0, outputPerMillion: 0, perInput: 0, ...over });
const tokens = (promptTokens: number, completionTokens: number) => ({ promptTokens, completionTokens });

function chatCtx(body: Record<string, unknown>): InferenceContext {
  const a = admitChat({ messages: [{ role: 'user', content: 'hi' }], ...body }, catalog, { defaultTemperature: 0.7 });
  if (!a.ok) throw new Error('refused');
  return a.ctx;
}

function embedCtx(input: string | string[]): InferenceContext {
  const a = admitEmbeddings({ model: 'svc-embed', input }, catalog, 16);
  if (!a.ok) throw new Error('refused');
  return a.ctx;
}

describe('costOf', () => {
  it('applies per-million prices exactly when they divide evenly', () => {
    const p = price({ inputPerMillion: 500_000, outputPerMillion: 1_500_000 });
    expect(costOf(p, tokens(1_000_000, 0), 1)).toBe(500_000);
    expect(costOf(p, tokens(2_000_000, 1_000_000), 1)).toBe(2_500_000);
    expect(costOf(p, tokens(0, 0), 1)).toBe(0);
  });

  it('rounds a fraction of a micro-unit up', () => {
    const p = price({ inputPerMillion: 500_000 });
    expect(costOf(p, tokens(1, 0), 1)).toBe(1); // 0.5 → 1
    expect(costOf(p, tokens(3, 0), 1)).toBe(2); // 1.5 → 2
  });

  it('rounds once, on the sum of prompt and completion, not per part', () => {
    const p = price({ inputPerMillion: 400_000, outputPerMillion: 400_000 });
    // 0.4 + 0.4 = 0.8 → 1 (rounding each part would give 2)
    expect(costOf(p, tokens(1, 1), 1)).toBe(1);
    // 2.4 + 2.4 = 4.8 → 5 (rounding each part would give 6)
    expect(costOf(p, tokens(6, 6), 1)).toBe(5);
  });

  it('computes in BigInt: exact where floating point would be off by one', () => {
    // 9007199254740991 × 999999 / 1e6 = 9007190247541736.75… → 9007190247541737;
    // Math.ceil(t * p / 1e6) in doubles gives 9007190247541736.
    expect(costOf(price({ inputPerMillion: 999_999 }), tokens(Number.MAX_SAFE_INTEGER, 0), 1)).toBe(9_007_190_247_541_737);
    expect(costOf(price({ outputPerMillion: 1_000_000 }), tokens(0, Number.MAX_SAFE_INTEGER), 1)).toBe(Number.MAX_SAFE_INTEGER);
  });

  it('a cost beyond Number.MAX_SAFE_INTEGER is a RangeError, never a rounded number', () => {
    expect(() => costOf(price({ inputPerMillion: 1_000_001 }), tokens(Number.MAX_SAFE_INTEGER, 0), 1)).toThrow(RangeError);
    expect(() => costOf(price({ perInput: 2 }), tokens(0, 0), Number.MAX_SAFE_INTEGER)).toThrow('cost out of range');
  });

  it('embeddings are priced per input string, whatever the tokens', () => {
    const embed = priceOf('sim-embed-1'); // perInput 20
    expect(embed).toEqual({ inputPerMillion: 0, outputPerMillion: 0, perInput: 20 });
    expect(costOf(embed, tokens(1, 0), 1)).toBe(20);
    expect(costOf(embed, tokens(123_456, 0), 3)).toBe(60);
  });

  it('per-input and per-token prices add up (the token part rounded on its own)', () => {
    const p = price({ inputPerMillion: 1_000_000, perInput: 20 });
    expect(costOf(p, tokens(5, 0), 2)).toBe(5 + 40);
    expect(costOf(price({ inputPerMillion: 1, perInput: 7 }), tokens(1, 0), 3)).toBe(1 + 21);
  });

  it('chat prices have no per-input part: requestCount does not change the cost', () => {
    const quick = priceOf('sim-quick-1'); // 100_000 in, 400_000 out
    expect(costOf(quick, tokens(10, 5), 1)).toBe(3); // 1_000_000 + 2_000_000 = 3_000_000 / 1e6
    expect(costOf(quick, tokens(10, 5), 4)).toBe(3);
  });
});

describe('worstCase', () => {
  it('chat without a cap: prompt = promptBytes + 8 per message + 16, completion = maxOutputTokens', () => {
    const ctx = chatCtx({ model: 'svc-quick' });
    expect(ctx.promptBytes).toBe(32); // '[{"role":"user","content":"hi"}]'
    expect(worstCase(priceOf('sim-quick-1'), ctx, ctx.promptBytes, ctx.messageCount)).toEqual({
      promptTokens: 32 + 8 + 16,
      completionTokens: 4096,
      cost: 1644, // (56 × 100_000 + 4096 × 400_000) / 1e6
    });
  });

  it('uses the byte and message counts it is given', () => {
    const ctx = chatCtx({ model: 'svc-quick', max_tokens: 10 });
    expect(worstCase(price({ inputPerMillion: 1_000_000, outputPerMillion: 1_000_000 }), ctx, 1000, 3)).toEqual({
      promptTokens: 1000 + 24 + 16,
      completionTokens: 10,
      cost: 1050,
    });
  });

  it('completion is the effective max_tokens: the caller cap, or the svc-deep floor when raised', () => {
    const p = priceOf('sim-deep-r1'); // 2_000_000 in, 8_000_000 out
    const wc = (body: Record<string, unknown>) => {
      const ctx = chatCtx(body);
      return worstCase(p, ctx, ctx.promptBytes, ctx.messageCount);
    };
    expect(wc({ model: 'svc-quick', max_tokens: 5 }).completionTokens).toBe(5);
    expect(wc({ model: 'svc-core', max_completion_tokens: 700 }).completionTokens).toBe(700);
    expect(wc({ model: 'svc-deep' })).toEqual({ promptTokens: 56, completionTokens: 8000, cost: 56 * 2 + 8000 * 8 });
    expect(wc({ model: 'svc-deep', max_tokens: 100 }).completionTokens).toBe(8000);
    expect(wc({ model: 'svc-deep', max_tokens: 20_000 }).completionTokens).toBe(20_000);
    // Both fields: max_completion_tokens is the one the hold covers.
    expect(wc({ model: 'svc-core', max_tokens: 700, max_completion_tokens: 50 }).completionTokens).toBe(50);
    expect(wc({ model: 'svc-core', max_tokens: 50, max_completion_tokens: 700 }).completionTokens).toBe(700);
    expect(wc({ model: 'svc-deep', max_tokens: 20_000, max_completion_tokens: 100 }).completionTokens).toBe(8000);
  });

  it('embeddings: no completion tokens; the cost is per input', () => {
    const ctx = embedCtx(['abc', 'défg']);
    expect(ctx.promptBytes).toBe(15); // '["abc","défg"]', é is 2 bytes
    expect(ctx.messageCount).toBe(2);
    expect(worstCase(priceOf('sim-embed-1'), ctx, ctx.promptBytes, ctx.messageCount)).toEqual({
      promptTokens: 15 + 16 + 16,
      completionTokens: 0,
      cost: 40,
    });
  });
});

describe('calendar keys (UTC)', () => {
  const lastMs = Date.UTC(2026, 7, 31, 23, 59, 59, 999); // 2026-08-31T23:59:59.999Z

  it('periodOf is the UTC month, dayOf the UTC day', () => {
    expect(periodOf(lastMs)).toBe('2026-08');
    expect(dayOf(lastMs)).toBe('2026-08-31');
    expect(periodOf(lastMs + 1)).toBe('2026-09');
    expect(dayOf(lastMs + 1)).toBe('2026-09-01');
    expect(periodOf(Date.UTC(2026, 11, 31, 23, 59, 59, 999))).toBe('2026-12');
    expect(periodOf(Date.UTC(2027, 0, 1))).toBe('2027-01');
  });

  it('answers as a fresh date string would, whatever times came before (the last day asked is kept)', () => {
    const dayMs = 86_400_000;
    // Times clustered around day and month boundaries, in any order, repeated.
    const near = fc.tuple(fc.integer({ min: 20_000, max: 21_000 }), fc.integer({ min: -3, max: 3 })).map(([d, off]) => d * dayMs + off);
    const any = fc.integer({ min: 0, max: 4_102_444_800_000 }); // up to 2100
    fc.assert(
      fc.property(fc.array(fc.oneof(near, any), { minLength: 1, maxLength: 40 }), (times) => {
        for (const t of times) {
          const iso = new Date(t).toISOString();
          expect(periodOf(t)).toBe(iso.slice(0, 7));
          expect(dayOf(t)).toBe(iso.slice(0, 10));
        }
      }),
      { numRuns: 500 },
    );
  });

  it('minuteOf counts whole minutes since the epoch', () => {
    expect(minuteOf(0)).toBe(0);
    expect(minuteOf(59_999)).toBe(0);
    expect(minuteOf(60_000)).toBe(1);
    expect(minuteOf(1_785_542_400_000)).toBe(29_759_040); // 2026-08-01T00:00:00Z
    expect(minuteOf(1_785_542_400_000 - 1)).toBe(29_759_039);
  });

  it('does not depend on the local time zone', () => {
    const saved = process.env.TZ;
    try {
      for (const tz of ['Pacific/Kiritimati', 'Pacific/Pago_Pago', 'UTC']) {
        process.env.TZ = tz; // UTC+14, UTC-11
        expect(periodOf(lastMs)).toBe('2026-08');
        expect(dayOf(lastMs)).toBe('2026-08-31');
        expect(periodOf(lastMs + 1)).toBe('2026-09');
        expect(dayOf(lastMs + 1)).toBe('2026-09-01');
        expect(minuteOf(lastMs + 1)).toBe(minuteOf(lastMs) + 1);
      }
    } finally {
      if (saved === undefined) delete process.env.TZ;
      else process.env.TZ = saved;
    }
  });
});
