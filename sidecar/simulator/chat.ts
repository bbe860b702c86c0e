/**
 * POST /v1/chat/completions: request validation, the deterministic plan of
 * what to answer (token counts, truncation, tool call) and the non-streamed
 * response body.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { DirectiveScanner, type Directives } from './directives.js';
import { invalidRequest, type OpenAIError } from './errors.js';
import { completionId, nowSeconds, toolCallId } from './ids.js';
import type { ResolvedOptions } from './options.js';
import { content, estimateTokens, reasoning } from './text.js';
import { argumentsFor, chooseTool } from './tools.js';

export interface ChatRequest {
  readonly model: string;
  readonly messages: readonly unknown[];
  readonly stream: boolean;
  readonly includeUsage: boolean;
  readonly maxTokens: number | null;
  readonly tools: unknown;
  readonly toolChoice: unknown;
}

export type FinishReason = 'stop' | 'length' | 'tool_calls';

export interface ChatPlan {
  readonly id: string;
  readonly created: number;
  readonly model: string;
  readonly isReasoningModel: boolean;
  /** Reasoning words to emit (after max_tokens truncation). */
  readonly reasoningTokens: number;
  /** Visible content words to emit (after max_tokens truncation). */
  readonly contentTokens: number;
  readonly toolCall: { readonly id: string; readonly name: string; readonly arguments: string } | null;
  readonly finishReason: FinishReason;
  readonly promptTokens: number;
  readonly completionTokens: number;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function tokenLimit(body: Record<string, unknown>, field: string): number | null | { error: OpenAIError } {
  const v = body[field];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
    return { error: invalidRequest(`Invalid '${field}': expected an integer of at least 1, got ${JSON.stringify(v)}.`, field, 'invalid_value') };
  }
  return v;
}

export function parseChat(body: unknown): ChatRequest | { error: OpenAIError } {
  if (!isObject(body)) return { error: invalidRequest('The request body must be a JSON object.') };
  const { model, messages } = body;
  if (typeof model !== 'string' || model === '') {
    return { error: invalidRequest('You must provide a model parameter.', 'model', 'missing_required_parameter') };
  }
  if (!Array.isArray(messages)) {
    return { error: invalidRequest("Missing required parameter: 'messages'.", 'messages', 'missing_required_parameter') };
  }
  if (messages.length === 0) {
    return { error: invalidRequest("Invalid 'messages': empty array. Expected an array with minimum length 1.", 'messages', 'empty_array') };
  }
  for (let i = 0; i < messages.length; i++) {
    if (!isObject(messages[i])) return { error: invalidRequest(`Invalid type for 'messages[${i}]': expected an object.`, `messages[${i}]`, 'invalid_type') };
  }
  if (body.tools !== undefined && body.tools !== null && !Array.isArray(body.tools)) {
    return { error: invalidRequest("Invalid type for 'tools': expected an array.", 'tools', 'invalid_type') };
  }
  const maxCompletion = tokenLimit(body, 'max_completion_tokens');
  if (isObject(maxCompletion)) return maxCompletion;
  const max = tokenLimit(body, 'max_tokens');
  if (isObject(max)) return max;
  const streamOptions = body.stream_options;
  return {
    model,
    messages,
    stream: body.stream === true,
    includeUsage: isObject(streamOptions) && streamOptions.include_usage === true,
    maxTokens: maxCompletion ?? max,
    tools: body.tools,
    toolChoice: body.tool_choice,
  };
}

/** One pass over the messages: prompt size estimate and directives. */
export function scanChat(req: ChatRequest, headers: IncomingHttpHeaders): { promptTokens: number; directives: Readonly<Directives> } {
  const scanner = new DirectiveScanner();
  let chars = 0;
  for (const m of req.messages) {
    const c = (m as Record<string, unknown>).content;
    if (typeof c === 'string') {
      chars += c.length;
      scanner.text(c);
    } else if (Array.isArray(c)) {
      for (const part of c) {
        if (isObject(part) && typeof part.text === 'string') {
          chars += part.text.length;
          scanner.text(part.text);
        }
      }
    }
  }
  scanner.header(headers['x-sim-directive']);
  return { promptTokens: estimateTokens(chars), directives: scanner.result() };
}

export function planChat(
  req: ChatRequest,
  promptTokens: number,
  d: Readonly<Directives>,
  opts: ResolvedOptions,
): ChatPlan | { error: OpenAIError } {
  const chosen = chooseTool(req.tools, req.toolChoice, d.tool === true);
  if (chosen !== null && 'message' in chosen) return { error: chosen };
  const isReasoningModel = opts.reasoningModels.has(req.model);
  const limit = req.maxTokens ?? Number.POSITIVE_INFINITY;
  const wantReasoning = isReasoningModel ? (d.reasoning ?? opts.reasoningTokens) : 0;
  const reasoningTokens = Math.min(wantReasoning, limit);
  const room = limit - reasoningTokens;

  let toolCall: ChatPlan['toolCall'] = null;
  let contentTokens = 0;
  let answerTokens = 0;
  let finishReason: FinishReason;
  if (chosen !== null) {
    const args = argumentsFor(chosen.parameters);
    const argTokens = estimateTokens(args.length);
    if (room >= argTokens) {
      toolCall = { id: toolCallId(), name: chosen.name, arguments: args };
      answerTokens = argTokens;
      finishReason = 'tool_calls';
    } else finishReason = 'length';
  } else {
    const want = d.tokens ?? opts.completionTokens;
    contentTokens = Math.min(want, room);
    answerTokens = contentTokens;
    finishReason = reasoningTokens < wantReasoning || contentTokens < want ? 'length' : 'stop';
  }
  return {
    id: completionId(),
    created: nowSeconds(),
    model: req.model,
    isReasoningModel,
    reasoningTokens,
    contentTokens,
    toolCall,
    finishReason,
    promptTokens,
    completionTokens: reasoningTokens + answerTokens,
  };
}

export function usageJson(plan: ChatPlan): string {
  const total = plan.promptTokens + plan.completionTokens;
  const details = plan.isReasoningModel ? `,"completion_tokens_details":{"reasoning_tokens":${plan.reasoningTokens}}` : '';
  return `{"prompt_tokens":${plan.promptTokens},"completion_tokens":${plan.completionTokens},"total_tokens":${total}${details}}`;
}

function messageJson(plan: ChatPlan): string {
  const r = plan.isReasoningModel ? `,"reasoning_content":${reasoning.json(plan.reasoningTokens)}` : '';
  const t = plan.toolCall;
  if (t) {
    const call = `{"id":"${t.id}","type":"function","function":{"name":${JSON.stringify(t.name)},"arguments":${JSON.stringify(t.arguments)}}}`;
    return `{"role":"assistant","content":null${r},"tool_calls":[${call}]}`;
  }
  return `{"role":"assistant","content":${content.json(plan.contentTokens)}${r}}`;
}

/** The non-streamed chat.completion body. */
export function renderChat(plan: ChatPlan, withUsage: boolean): string {
  return (
    `{"id":"${plan.id}","object":"chat.completion","created":${plan.created},"model":${JSON.stringify(plan.model)},` +
    `"system_fingerprint":"fp_sim","choices":[{"index":0,"message":${messageJson(plan)},"logprobs":null,` +
    `"finish_reason":"${plan.finishReason}"}]` +
    (withUsage ? `,"usage":${usageJson(plan)}}` : '}')
  );
}
