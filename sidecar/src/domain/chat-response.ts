import { isObject, tryParseJson } from '../util/json.js';
import type { InferenceContext } from './request-context.js';
import { svcBlock } from './svc-block.js';
import { estimatedUsage, readUsage, usageJson, type Usage } from './usage.js';
import { estimateTokens } from './token-estimate.js';

/** usage: the provider's, or counted by the gateway (estimated) when it sent none; body: the JSON text or its bytes. */
export type Rewritten = { ok: true; body: string | Buffer; usage: Usage } | { ok: false };

/** The message fields a caller gets; everything else a provider sends stays behind. */
export const MESSAGE_FIELDS = ['role', 'content', 'tool_calls', 'function_call', 'refusal'] as const;

/** Where providers put a reasoning model's hidden thinking: never delivered, always billed (spec rule 6). */
export const REASONING_FIELDS = ['reasoning_content', 'reasoning'] as const;

/** The hidden reasoning texts of a message or delta (to count, never to deliver). */
export function reasoningOf(m: unknown): string[] {
  if (!isObject(m)) return [];
  const out: string[] = [];
  for (const f of REASONING_FIELDS) {
    const v = m[f];
    if (typeof v === 'string') out.push(v);
  }
  return out;
}

/** Keeps only the documented message fields: reasoning text and vendor extras stay behind. */
export function cleanMessage(m: unknown): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (!isObject(m)) return out;
  for (const f of MESSAGE_FIELDS) if (m[f] !== undefined) out[f] = m[f];
  return out;
}

/**
 * Rewrites a provider's chat.completion for the caller: the alias as model,
 * the request id as id, no reasoning text, no vendor fields, the svc block.
 * A body that is not a chat completion is a provider failure (ok: false).
 * `created` (Unix seconds, the request's start) stands in for a provider's
 * missing one: the domain reads no clock.
 */
export function rewriteChatCompletion(raw: Buffer, ctx: InferenceContext, requestId: string, brand: string, created: number): Rewritten {
  const parsed = tryParseJson(raw);
  if (!isObject(parsed) || !Array.isArray(parsed.choices)) return { ok: false };
  // Without provider usage the gateway counts what was generated: the returned messages and their hidden reasoning.
  const generated: unknown[] = [];
  const choices = parsed.choices.map((c: unknown, i: number) => {
    const choice = isObject(c) ? c : {};
    const message = cleanMessage(choice.message);
    generated.push(message, reasoningOf(choice.message));
    const out: Record<string, unknown> = {
      index: typeof choice.index === 'number' ? choice.index : i,
      message,
      finish_reason: typeof choice.finish_reason === 'string' ? choice.finish_reason : null,
    };
    if (choice.logprobs !== undefined) out.logprobs = choice.logprobs;
    return out;
  });
  const usage = readUsage(parsed.usage) ?? estimatedUsage(ctx.promptEstimate, estimateTokens(generated));
  const body: Record<string, unknown> = {
    id: requestId,
    object: 'chat.completion',
    created: typeof parsed.created === 'number' ? parsed.created : created,
    model: ctx.resolved.alias,
    choices,
  };
  body.usage = usageJson(usage);
  body[brand] = svcBlock(ctx, requestId);
  return { ok: true, body: JSON.stringify(body), usage };
}
