/**
 * Streamed chat completions, the OpenAI way: a role chunk, reasoning deltas
 * (reasoning models), content deltas one word each (or tool-call deltas), a
 * finish chunk, an optional usage chunk, then `data: [DONE]`. Streaming
 * failure directives cut in after the second generated chunk.
 */
import type { ServerResponse } from 'node:http';
import { type ChatPlan, usageJson } from './chat.js';
import type { Directives } from './directives.js';
import { STREAM_ERROR_EVENT } from './errors.js';
import type { SimulatorStats } from './stats.js';
import { SseWriter } from './sse.js';
import type { SliceSettings } from './slices.js';
import { content, reasoning } from './text.js';
import { argumentFragments } from './tools.js';

export interface StreamSettings {
  readonly includeUsage: boolean;
  readonly chunkDelayMs: number;
  readonly path: string;
  /** Uneven slices instead of one write per event (slices.ts), or null. */
  readonly slices: SliceSettings | null;
}

const ROLE_DELTA = '{"role":"assistant","content":""}';
const DONE = 'data: [DONE]\n\n';
/** Generated chunks sent before a midstream failure directive acts (unless `fail-after` says otherwise). */
const FAIL_AFTER = 2;

type Failure = 'reset' | 'event' | 'end' | 'malformed' | 'hang' | null;

function failureOf(d: Readonly<Directives>): Failure {
  if (d.midstreamError) return 'reset';
  if (d.midstreamErrorEvent) return 'event';
  if (d.midstreamEnd) return 'end';
  if (d.midstreamMalformed) return 'malformed';
  if (d.hang) return 'hang';
  return null;
}

export async function streamChat(
  res: ServerResponse,
  plan: ChatPlan,
  d: Readonly<Directives>,
  settings: StreamSettings,
  stats: SimulatorStats,
): Promise<void> {
  const usageMode = d.noUsage ? 'none' : d.usageInFinish ? 'finish' : settings.includeUsage ? 'chunk' : 'none';
  const delay = d.chunkDelayMs ?? settings.chunkDelayMs;
  const failure = failureOf(d);
  const failAfter = d.failAfter ?? FAIL_AFTER;
  const envelope = `data: {"id":"${plan.id}","object":"chat.completion.chunk","created":${plan.created},"model":${JSON.stringify(plan.model)},"system_fingerprint":"fp_sim",`;
  const head = `${envelope}"choices":[{"index":0,"delta":`;
  const usageNull = usageMode === 'chunk' ? ',"usage":null' : '';
  const tail = `,"logprobs":null,"finish_reason":null}]${usageNull}}\n\n`;

  let chunks = 0;
  let generated = 0;
  let contentSent = 0;
  let reasoningSent = 0;
  let completed = false;

  stats.streamStarted();
  const w = new SseWriter(res, (byClient) => {
    if (!byClient) return stats.streamEnded(completed ? 'completed' : 'aborted');
    stats.streamEnded({ path: settings.path, model: plan.model, contentTokensSent: contentSent, reasoningTokensSent: reasoningSent, chunksSent: chunks });
  }, settings.slices);

  /** Runs the failure directive; resolves when the stream is over. */
  const fail = async (): Promise<void> => {
    if (failure === 'reset') w.kill();
    else if (failure === 'event') w.end(STREAM_ERROR_EVENT);
    else if (failure === 'end') w.end('');
    // A raw control character inside a string: shaped like every other chunk, but not JSON.
    else if (failure === 'malformed') w.end(delta('{"content":"bro\u0001ken"}'));
    else await w.untilClosed();
  };

  /**
   * Sends one event then waits the chunk delay; false when the stream must
   * stop (client gone, or a failure directive acted after this chunk).
   */
  const emit = async (event: string, kind: 'control' | 'reasoning' | 'content' | 'tool'): Promise<boolean> => {
    if (!(await w.send(event))) return false;
    chunks++;
    if (kind === 'content') contentSent++;
    else if (kind === 'reasoning') reasoningSent++;
    if (kind !== 'control' && failure !== null && ++generated >= failAfter) {
      await fail();
      return false;
    }
    await w.pause(delay);
    return !w.closed;
  };
  const delta = (json: string): string => head + json + tail;

  w.start();
  if ((d.prefillMs ?? 0) > 0 || (failure !== null && failAfter === 0)) {
    // The provider has answered 200 and is still working on the first token.
    w.flushHeaders();
    if (failure !== null && failAfter === 0) return fail();
    await w.pause(d.prefillMs ?? 0);
    if (w.closed) return;
  }
  if (!(await emit(delta(ROLE_DELTA), 'control'))) return;
  for (let i = 0; i < plan.reasoningTokens; i++) {
    if (!(await emit(delta(reasoning.delta(i)), 'reasoning'))) return;
  }
  const call = plan.toolCall;
  if (call) {
    const first = `{"tool_calls":[{"index":0,"id":"${call.id}","type":"function","function":{"name":${JSON.stringify(call.name)},"arguments":""}}]}`;
    if (!(await emit(delta(first), 'tool'))) return;
    for (const frag of argumentFragments(call.arguments)) {
      const args = `{"tool_calls":[{"index":0,"function":{"arguments":${JSON.stringify(frag)}}}]}`;
      if (!(await emit(delta(args), 'tool'))) return;
    }
  } else {
    for (let i = 0; i < plan.contentTokens; i++) {
      if (!(await emit(delta(content.delta(i)), 'content'))) return;
    }
  }
  if (failure !== null) return fail(); // fewer generated chunks than FAIL_AFTER: fail before finishing

  const finishUsage = usageMode === 'finish' ? `,"usage":${usageJson(plan)}` : usageNull;
  if (!(await emit(`${head}{},"logprobs":null,"finish_reason":"${plan.finishReason}"}]${finishUsage}}\n\n`, 'control'))) return;
  if (usageMode === 'chunk' && !(await emit(`${envelope}"choices":[],"usage":${usageJson(plan)}}\n\n`, 'control'))) return;
  completed = true;
  w.end(DONE);
}
