import type { InferenceContext } from './request-context.js';

/** The `<brand>` block every successful inference response carries. */
export function svcBlock(ctx: InferenceContext, requestId: string): Record<string, unknown> {
  const block: Record<string, unknown> = { alias: ctx.resolved.alias, request_id: requestId };
  if (ctx.endpoint === 'embeddings') block.request_count = ctx.requestCount;
  if (ctx.floor) {
    block.max_tokens_floor_applied = true;
    block.requested_max_tokens = ctx.floor.requested;
    block.effective_max_tokens = ctx.floor.effective;
  }
  return block;
}
