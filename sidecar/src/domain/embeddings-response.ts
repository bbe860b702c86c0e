import { isObject, tryParseJson } from '../util/json.js';
import type { InferenceContext } from './request-context.js';
import type { Rewritten } from './chat-response.js';
import { svcBlock } from './svc-block.js';
import { estimatedUsage, readUsage } from './usage.js';

/** Rewrites a provider's embeddings list: alias as model, svc block with request_count. */
export function rewriteEmbeddings(raw: Buffer, ctx: InferenceContext, requestId: string, brand: string): Rewritten {
  const parsed = tryParseJson(raw);
  if (!isObject(parsed) || !Array.isArray(parsed.data)) return { ok: false };
  const data = [];
  for (let i = 0; i < parsed.data.length; i++) {
    const item: unknown = parsed.data[i];
    if (!isObject(item) || (!Array.isArray(item.embedding) && typeof item.embedding !== 'string')) return { ok: false };
    data.push({ object: 'embedding', index: typeof item.index === 'number' ? item.index : i, embedding: item.embedding });
  }
  if (data.length !== ctx.requestCount) return { ok: false };
  const usage = readUsage(parsed.usage) ?? estimatedUsage(ctx.promptEstimate, 0);
  const body: Record<string, unknown> = { object: 'list', data, model: ctx.resolved.alias };
  body.usage = { prompt_tokens: usage.promptTokens, total_tokens: usage.totalTokens };
  body[brand] = svcBlock(ctx, requestId);
  return { ok: true, body: JSON.stringify(body), usage };
}
