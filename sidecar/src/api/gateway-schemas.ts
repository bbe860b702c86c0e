import { z } from 'zod';
import { MAX_TOKENS_LIMIT } from '../domain/chat-request.js';

/**
 * The gateway paths' request bodies as zod schemas, for the OpenAPI document.
 * On the hot path the bodies are checked by the hand-written admission code
 * (sidecar/src/domain/chat-request.ts, embeddings-request.ts), which also
 * resolves aliases and builds the upstream body; test/unit/openapi.test.ts
 * runs a corpus of bodies through both and fails when they disagree.
 * Unknown fields are passed to the provider, so the objects are open.
 */
const maxTokens = z.number().int().min(1).max(MAX_TOKENS_LIMIT);

export const ChatMessage = z.looseObject({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool', 'function']),
  content: z.union([z.string(), z.array(z.unknown()), z.null()]).optional(),
});

export const ChatRequest = z.looseObject({
  model: z.string().min(1).meta({ description: 'A chat alias (floating or pinned), e.g. svc-core or svc-core-2026-08' }),
  messages: z.array(ChatMessage).min(1),
  max_tokens: maxTokens.nullable().optional(),
  max_completion_tokens: maxTokens.nullable().optional(),
  temperature: z.number().min(0).max(2).nullable().optional().meta({ description: 'Default 0.7' }),
  stream: z.boolean().nullable().optional(),
  stream_options: z.looseObject({}).nullable().optional(),
  tools: z.array(z.unknown()).nullable().optional(),
  tool_choice: z.union([z.string(), z.looseObject({}), z.array(z.unknown())]).nullable().optional(),
  n: z.literal(1).nullable().optional(),
});

export const EmbeddingsRequest = z.looseObject({
  model: z.string().min(1).meta({ description: 'An embedding alias, e.g. svc-embed' }),
  input: z.union([z.string().min(1), z.array(z.string().min(1)).min(1).max(256)]),
});

export const UsageQuery = z
  .object({
    from: z.string().regex(/^\d{4}-\d{2}-\d{2}$/).optional(),
    to: z.string().regex(/^\d{4}-\d{2}-\d{2}$/).optional(),
  })
  .strict();
