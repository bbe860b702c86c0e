import { isNonNegativeInt, isObject } from '../util/json.js';

/** Token usage of one request as the gateway will bill and report it. */
export interface Usage {
  readonly promptTokens: number;
  readonly completionTokens: number;
  readonly totalTokens: number;
  /** true when counted by the gateway because the provider sent none. */
  readonly estimated: boolean;
}

/** Reads an OpenAI-style usage object; undefined if absent or malformed. */
export function readUsage(u: unknown): Usage | undefined {
  if (!isObject(u)) return undefined;
  const prompt = u.prompt_tokens;
  const completion = u.completion_tokens ?? 0;
  if (!isNonNegativeInt(prompt) || !isNonNegativeInt(completion)) return undefined;
  const total = isNonNegativeInt(u.total_tokens) ? Math.max(u.total_tokens, prompt + completion) : prompt + completion;
  return { promptTokens: prompt, completionTokens: completion, totalTokens: total, estimated: false };
}

export function usageJson(u: Usage): { prompt_tokens: number; completion_tokens: number; total_tokens: number } {
  return { prompt_tokens: u.promptTokens, completion_tokens: u.completionTokens, total_tokens: u.totalTokens };
}

export function estimatedUsage(promptTokens: number, completionTokens: number): Usage {
  return { promptTokens, completionTokens, totalTokens: promptTokens + completionTokens, estimated: true };
}
