import { isUtf8 } from 'node:buffer';
import { isObject, tryParseJson } from '../util/json.js';
import type { InferenceContext } from './request-context.js';
import type { Rewritten } from './chat-response.js';
import { scanBody } from './json-guard.js';
import { svcBlock } from './svc-block.js';
import { COPY_MIN_BYTES } from './upstream-body.js';
import { estimatedUsage, readUsage } from './usage.js';

interface Item {
  readonly index: number;
  readonly embedding: unknown;
}

/** Rewrites a provider's embeddings list: alias as model, svc block with request_count. */
export function rewriteEmbeddings(raw: Buffer, ctx: InferenceContext, requestId: string, brand: string): Rewritten {
  const parsed = tryParseJson(raw);
  if (!isObject(parsed) || !Array.isArray(parsed.data)) return { ok: false };
  const data: Item[] = [];
  for (let i = 0; i < parsed.data.length; i++) {
    const item: unknown = parsed.data[i];
    if (!isObject(item) || (!Array.isArray(item.embedding) && typeof item.embedding !== 'string')) return { ok: false };
    data.push({ index: typeof item.index === 'number' ? item.index : i, embedding: item.embedding });
  }
  if (data.length !== ctx.requestCount) return { ok: false };
  const usage = readUsage(parsed.usage) ?? estimatedUsage(ctx.promptEstimate, 0);
  // Everything after the list, in the order the caller reads it.
  const after: Record<string, unknown> = { model: ctx.resolved.alias, usage: { prompt_tokens: usage.promptTokens, total_tokens: usage.totalTokens } };
  after[brand] = svcBlock(ctx, requestId);
  const body =
    (raw.length >= COPY_MIN_BYTES && withProviderVectors(raw, data, after)) ||
    JSON.stringify({ object: 'list', data: data.map((d) => ({ object: 'embedding', index: d.index, embedding: d.embedding })), ...after });
  return { ok: true, body, usage };
}

/**
 * The list with each vector as the provider's own bytes: writing a vector of
 * 1,536 numbers again costs more than reading it, and it goes out unchanged.
 * null (serialise instead) unless every element's `embedding` was found where
 * JSON.parse found it, and the answer is valid UTF-8 (otherwise serialising
 * sends U+FFFD where raw bytes would send the invalid ones).
 */
function withProviderVectors(raw: Buffer, data: readonly Item[], after: Record<string, unknown>): Buffer | null {
  const { items } = scanBody(raw, Number.MAX_SAFE_INTEGER, { itemsOf: 'data' });
  if (!items || items.length !== data.length || !isUtf8(raw)) return null;
  const parts: Buffer[] = [Buffer.from('{"object":"list","data":[')];
  for (let i = 0; i < data.length; i++) {
    const span = items[i]?.get('embedding');
    if (!span) return null;
    parts.push(Buffer.from(`${i ? ',' : ''}{"object":"embedding","index":${JSON.stringify((data[i] as Item).index)},"embedding":`), raw.subarray(span[0], span[1]), Buffer.from('}'));
  }
  parts.push(Buffer.from(`],${JSON.stringify(after).slice(1)}`));
  return Buffer.concat(parts);
}
