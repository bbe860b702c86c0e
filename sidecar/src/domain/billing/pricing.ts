import type { Price } from '../../config/schema.js';
import type { InferenceContext } from '../request-context.js';
import type { Usage } from '../usage.js';

/**
 * Costs in integer micro-units. Per-million-token prices are applied to the
 * sum and rounded up once, in BigInt so no product can lose precision.
 */
export function costOf(price: Price, usage: Pick<Usage, 'promptTokens' | 'completionTokens'>, requestCount: number): number {
  const tokens = BigInt(usage.promptTokens) * BigInt(price.inputPerMillion) + BigInt(usage.completionTokens) * BigInt(price.outputPerMillion);
  const fromTokens = (tokens + 999_999n) / 1_000_000n;
  const total = fromTokens + BigInt(requestCount) * BigInt(price.perInput);
  if (total > BigInt(Number.MAX_SAFE_INTEGER)) throw new RangeError('cost out of range');
  return Number(total);
}

/** Tokens a request can consume at most, the basis of its credit hold. */
export interface WorstCase {
  readonly promptTokens: number;
  readonly completionTokens: number;
  readonly cost: number;
}

/**
 * The worst case: prompt tokens bounded by the UTF-8 size of what is sent
 * (a token covers at least one byte) plus a per-message allowance for the
 * chat template, and completion tokens bounded by the effective max_tokens
 * the gateway sends upstream (reasoning included).
 */
export function worstCase(price: Price, ctx: InferenceContext, promptBytes: number, messageCount: number): WorstCase {
  const promptTokens = promptBytes + 8 * messageCount + 16;
  const completionTokens = ctx.endpoint === 'chat' ? (ctx.maxTokens ?? 0) : 0;
  return { promptTokens, completionTokens, cost: costOf(price, { promptTokens, completionTokens }, ctx.requestCount) };
}

/** UTC calendar keys: spend-cap period (month), usage day, throttling minute. */
export const periodOf = (now: number): string => new Date(now).toISOString().slice(0, 7);
export const dayOf = (now: number): string => new Date(now).toISOString().slice(0, 10);
export const minuteOf = (now: number): number => Math.floor(now / 60_000);
