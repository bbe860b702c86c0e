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

const DAY_MS = 86_400_000;

/**
 * The UTC day last asked about: its first millisecond and its keys. Epoch time has no
 * leap seconds, so a UTC day is exactly [k·DAY_MS, (k+1)·DAY_MS) and its month and date
 * are the same throughout: a request asks several times per day's millisecond, and a
 * date string costs half a microsecond to make.
 */
let day = { start: Number.NaN, period: '', date: '' };

function dayKeys(now: number): { readonly period: string; readonly date: string } {
  if (now >= day.start && now < day.start + DAY_MS) return day;
  const iso = new Date(now).toISOString();
  day = { start: Math.floor(now / DAY_MS) * DAY_MS, period: iso.slice(0, 7), date: iso.slice(0, 10) };
  return day;
}

/** UTC calendar keys: spend-cap period (month), usage day, throttling minute. */
export const periodOf = (now: number): string => dayKeys(now).period;
export const dayOf = (now: number): string => dayKeys(now).date;
export const minuteOf = (now: number): number => Math.floor(now / 60_000);
