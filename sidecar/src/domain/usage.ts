import { isNonNegativeInt, isObject } from '../util/json.js';

/** Token usage of one request as the gateway will bill and report it. */
export interface Usage {
  readonly promptTokens: number;
  readonly completionTokens: number;
  readonly totalTokens: number;
  /** true when counted by the gateway because the provider sent none. */
  readonly estimated: boolean;
}

/**
 * More tokens than any single request can use: a provider reporting more is
 * treated as reporting nothing (the gateway counts instead), so a bogus figure
 * can neither inflate a bill nor push a cost out of integer range.
 */
const MAX_REPORTED_TOKENS = 1_000_000_000;
const isTokenCount = (v: unknown): v is number => isNonNegativeInt(v) && v <= MAX_REPORTED_TOKENS;

/** Reads an OpenAI-style usage object; undefined if absent, malformed or absurd. */
export function readUsage(u: unknown): Usage | undefined {
  if (!isObject(u)) return undefined;
  const prompt = u.prompt_tokens;
  const completion = u.completion_tokens ?? 0;
  if (!isTokenCount(prompt) || !isTokenCount(completion)) return undefined;
  const total = isTokenCount(u.total_tokens) ? Math.max(u.total_tokens, prompt + completion) : prompt + completion;
  return { promptTokens: prompt, completionTokens: completion, totalTokens: total, estimated: false };
}

export function usageJson(u: Usage): { prompt_tokens: number; completion_tokens: number; total_tokens: number } {
  return { prompt_tokens: u.promptTokens, completion_tokens: u.completionTokens, total_tokens: u.totalTokens };
}

export function estimatedUsage(promptTokens: number, completionTokens: number): Usage {
  return { promptTokens, completionTokens, totalTokens: promptTokens + completionTokens, estimated: true };
}
