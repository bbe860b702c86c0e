import type { Catalog } from './catalog.js';
import { Errors, gatewayError, type GatewayError } from './errors.js';
import { resolveModelField } from './model-field.js';
import type { Admission, FloorReport } from './request-context.js';
import { estimateTokens } from './token-estimate.js';
import { upstreamBody, type RawBody } from './upstream-body.js';
import { isObject, isPositiveInt } from '../util/json.js';

export interface ChatPolicy {
  readonly defaultTemperature: number;
}

const ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool', 'function']);

const invalid = (param: string, message: string): { ok: false; error: GatewayError } => ({
  ok: false,
  error: gatewayError(Errors.invalidRequest, { param, message }),
});

/** Upper bound of max_tokens / max_completion_tokens (the spec leaves it open; README). */
export const MAX_TOKENS_LIMIT = 1_000_000;

function checkMessages(messages: unknown): { ok: false; error: GatewayError } | null {
  if (!Array.isArray(messages) || messages.length === 0) return invalid('messages', 'The field must be a non-empty array.');
  for (let i = 0; i < messages.length; i++) {
    const m: unknown = messages[i];
    if (!isObject(m)) return invalid(`messages[${i}]`, 'Each message must be an object.');
    if (typeof m.role !== 'string' || !ROLES.has(m.role)) {
      return invalid(`messages[${i}].role`, 'The role must be one of system, developer, user, assistant, tool.');
    }
    const c = m.content;
    const contentOk = typeof c === 'string' || Array.isArray(c) || (c == null && (m.role === 'assistant'));
    if (!contentOk) return invalid(`messages[${i}].content`, 'The content must be a string or an array of content parts.');
  }
  return null;
}

/**
 * Validates a chat request body and builds what goes upstream: the internal
 * model, the default temperature, usage always requested on streams, and the
 * max_tokens floor for reasoning models.
 */
export function admitChat(body: unknown, catalog: Catalog, policy: ChatPolicy, raw?: RawBody): Admission {
  if (!isObject(body)) return invalid('body', 'The request body must be a JSON object.');
  const model = resolveModelField(catalog, body.model, 'chat');
  if (!model.ok) return model;
  const bad = checkMessages(body.messages);
  if (bad) return bad;

  for (const field of ['max_tokens', 'max_completion_tokens'] as const) {
    const v = body[field];
    if (v != null && !(isPositiveInt(v) && v <= MAX_TOKENS_LIMIT)) return invalid(field, `The field must be a positive integer up to ${MAX_TOKENS_LIMIT}.`);
  }
  if (body.temperature != null && (typeof body.temperature !== 'number' || body.temperature < 0 || body.temperature > 2)) {
    return invalid('temperature', 'The field must be a number between 0 and 2.');
  }
  if (body.stream != null && typeof body.stream !== 'boolean') return invalid('stream', 'The field must be a boolean.');
  if (body.stream_options != null && !isObject(body.stream_options)) return invalid('stream_options', 'The field must be an object.');
  if (body.tools != null && !Array.isArray(body.tools)) return invalid('tools', 'The field must be an array.');
  if (body.tool_choice != null && typeof body.tool_choice !== 'string' && !isObject(body.tool_choice) && !Array.isArray(body.tool_choice)) {
    return invalid('tool_choice', 'The field must be a string, an object or an array.');
  }
  if (body.n != null && body.n !== 1) return invalid('n', 'Only n = 1 is supported.');

  const { resolved } = model;
  const stream = body.stream === true;
  const requested = (body.max_completion_tokens ?? body.max_tokens ?? null) as number | null;
  // Every request goes up with a cap: the caller's, raised to the floor for
  // reasoning models, or the model's default output cap (the worst case the
  // credit hold covers).
  let effective = requested ?? resolved.maxOutputTokens;
  let floor: FloorReport | null = null;
  if (resolved.maxTokensFloor !== null && (requested === null || requested < resolved.maxTokensFloor)) {
    effective = Math.max(resolved.maxTokensFloor, requested ?? 0);
    floor = { requested, effective };
  }

  const upstream: Record<string, unknown> = { ...body, model: resolved.internalModel };
  if (upstream.temperature == null) upstream.temperature = policy.defaultTemperature;
  // Whichever fields the caller used carry the effective cap; max_tokens when none.
  if (body.max_completion_tokens != null) upstream.max_completion_tokens = effective;
  if (body.max_tokens != null || body.max_completion_tokens == null) upstream.max_tokens = effective;
  if (stream) upstream.stream_options = { ...(isObject(body.stream_options) ? body.stream_options : {}), include_usage: true };
  else delete upstream.stream_options;

  // The prompt material the hold is priced on: the messages, and the tools when there are any.
  const sent = upstreamBody(upstream, body.tools ? ['messages', 'tools'] : ['messages'], raw);
  return {
    ok: true,
    upstreamBody: sent.bytes,
    ctx: {
      endpoint: 'chat',
      resolved,
      stream,
      floor,
      requestCount: 1,
      maxTokens: effective,
      promptEstimate: estimateTokens(body.messages),
      promptBytes: sent.memberBytes,
      messageCount: (body.messages as unknown[]).length,
    },
  };
}
