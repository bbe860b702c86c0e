import type { Price } from '../../config/schema.js';
import { Errors, gatewayError, type GatewayError } from '../errors.js';
import type { InferenceContext } from '../request-context.js';
import type { WorstCase } from './pricing.js';

/**
 * The answer when a request's worst case does not fit under the spend cap.
 * The hold was refused atomically (the cap is never exceeded); this only
 * makes the answer true and actionable:
 * - nothing of the cap is left (spend + open holds reach it): 429
 *   `spend_cap_exceeded`, waiting does not help until the period rolls over;
 * - something is left but not this request's worst case: 400
 *   `invalid_request` naming what to lower (`max_tokens`, or `input` for
 *   embeddings), with what is left and the largest max_tokens that would be
 *   served. A 400, not a 429: SDKs retry 429s, and a retry cannot succeed.
 * `remaining` is read after the refusal (informative; holds may have moved).
 */
export function capRefusal(remaining: number, price: Price, ctx: InferenceContext, worst: WorstCase, currency: string): GatewayError {
  if (remaining <= 0) return gatewayError(Errors.spendCapExceeded);
  const left = `Only ${remaining} micro-units (${currency}) of this period's spend cap are left (open requests' holds deducted); this request's worst case costs ${worst.cost}.`;
  if (ctx.endpoint !== 'chat') {
    return gatewayError(Errors.invalidRequest, { param: 'input', message: `${left} A request with fewer input strings would be served.` });
  }
  const fits = maxCompletionTokensWithin(remaining, price, worst.promptTokens, ctx.requestCount);
  const floor = ctx.resolved.maxTokensFloor ?? 1;
  if (fits < floor) {
    return gatewayError(Errors.invalidRequest, {
      param: 'messages',
      message: `${left} Even the smallest answer this model gives (max_tokens ${floor}) does not fit; a shorter prompt or another model might.`,
    });
  }
  return gatewayError(Errors.invalidRequest, { param: 'max_tokens', message: `${left} A max_tokens of at most ${fits} would be served.` });
}

/** The largest completion-token count whose cost, with the prompt's worst case, stays within `budget` (costOf rounds up once). */
export function maxCompletionTokensWithin(budget: number, price: Price, promptTokens: number, requestCount: number): number {
  const out = BigInt(price.outputPerMillion);
  const room = (BigInt(budget) - BigInt(requestCount) * BigInt(price.perInput)) * 1_000_000n - BigInt(promptTokens) * BigInt(price.inputPerMillion);
  if (room < 0n) return -1;
  if (out === 0n) return Number.MAX_SAFE_INTEGER;
  const m = room / out;
  return m > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(m);
}
