import { isObject, tryParseJson } from '../../util/json.js';
import { cleanMessage, reasoningOf } from '../chat-response.js';
import { Errors, envelope, gatewayError, type ErrorEntry } from '../errors.js';
import type { InferenceContext } from '../request-context.js';
import { svcBlock } from '../svc-block.js';
import { estimatedUsage, readUsage, usageJson, type Usage } from '../usage.js';
import { SseFramer, type SseEvent } from './framer.js';
import { scanDeltaChunk, type ChunkPrefix, type ChunkSpans, type ChunkTemplate } from './chunk-scan.js';

const DONE = Buffer.from('data: [DONE]\n\n');

const frame = (obj: unknown): string => `data: ${JSON.stringify(obj)}\n\n`;

/**
 * Rewrites a provider's chat.completion.chunk stream for the caller, chunk by
 * chunk as it flows: alias as model, request id as id, reasoning removed,
 * usage held back and delivered once, with the svc block, in the last chunk
 * before `data: [DONE]`. Counts what it delivered so an abandoned stream or a
 * provider without usage can still be billed (marked estimated). `created`
 * (Unix seconds, the request's start) is what the chunks say until the
 * provider gives its own: the domain reads no clock.
 */
export class ChatStreamRewriter {
  private readonly framer = new SseFramer();
  private providerUsage: Usage | undefined;
  private completionChars = 0;
  private deltaCount = 0;
  /** Set once the final chunk (or an error event) has been emitted. */
  private closed = false;
  private failed = false;
  /** A choice has reported its finish_reason: the answer itself is complete. */
  private finished = false;
  private readonly chunkHead: string;
  private readonly aliasJson: string;
  /** The provider's members before `choices`, as its last plain chunk had them (checked once per stream, not per chunk). */
  private prefix: ChunkPrefix | null = null;
  /** The provider's last fully scanned plain chunk, cut around its content text: later chunks that fit it are not scanned. */
  private template: ChunkTemplate | null = null;
  /** What a spliced chunk says before its choices, made again only when `created` changes (once per stream). */
  private spliceHead = '';
  /** The `created` spliceHead was made for; NaN (equal to nothing) until it is first made, so a provider's `created` of any value gets its head. */
  private spliceHeadCreated = Number.NaN;

  constructor(
    private readonly ctx: InferenceContext,
    private readonly requestId: string,
    private readonly brand: string,
    private readonly promptEstimate: number,
    private created: number,
  ) {
    this.chunkHead = `data: {"id":${JSON.stringify(requestId)},"object":"chat.completion.chunk","created":`;
    this.aliasJson = JSON.stringify(ctx.resolved.alias);
  }

  /** Bytes to deliver in place of this provider chunk (possibly empty). */
  push(chunk: Buffer): Buffer {
    if (this.closed) return Buffer.alloc(0);
    let events: SseEvent[];
    try {
      events = this.framer.push(chunk);
    } catch {
      return Buffer.from(this.fail());
    }
    return Buffer.from(this.render(events));
  }

  /**
   * The provider's stream ended: deliver anything left and close properly. A
   * provider that ended without `[DONE]` but after a finish_reason only left
   * out the terminator; one that ended before any finish_reason cut the answer
   * short, and the caller gets the error event instead of a clean end.
   */
  end(): Buffer {
    if (this.closed) return Buffer.alloc(0);
    const flushed = this.render(this.framer.flush());
    // A last event without its blank line may have been [DONE] or an error: already closed.
    if (this.closed) return Buffer.from(flushed);
    const last = this.finished ? this.finalChunk() : this.fail();
    return Buffer.concat([Buffer.from(flushed + last), this.failed ? Buffer.alloc(0) : DONE]);
  }

  /** Usage to bill: the provider's if it sent one, else counted from what was delivered. */
  usage(): Usage {
    if (this.providerUsage) return this.providerUsage;
    return estimatedUsage(this.promptEstimate, Math.max(this.deltaCount, Math.ceil(this.completionChars / 4)));
  }

  /** The caller's stream has its last event (the final chunk and [DONE], or the error event). */
  get ended(): boolean {
    return this.closed;
  }

  get completed(): boolean {
    return this.closed && !this.failed;
  }

  /** The stream ended with the error event (the provider failed). */
  get failedUpstream(): boolean {
    return this.failed;
  }

  private render(events: SseEvent[]): string {
    let out = '';
    for (const ev of events) {
      if (this.closed) break;
      if (ev.data === null) continue;
      if (ev.data === '[DONE]') {
        out += this.finalChunk() + 'data: [DONE]\n\n';
        continue;
      }
      const fast = scanDeltaChunk(ev.data, this.prefix, this.template);
      if (fast) {
        this.prefix = fast.prefix;
        // A chunk without content (the last one, with the finish_reason) leaves the template as it was.
        if (fast.template) this.template = fast.template;
        out += this.spliceChunk(fast);
        continue;
      }
      const chunk = tryParseJson(ev.data);
      if (!isObject(chunk) || chunk.error !== undefined) {
        out += this.fail();
        continue;
      }
      out += this.rewriteChunk(chunk);
    }
    return out;
  }

  /** A plain delta chunk: the provider's choices text between our id and alias, no parse. */
  private spliceChunk(c: ChunkSpans): string {
    if (c.created !== null) this.created = c.created;
    if (c.finished) this.finished = true;
    if (c.contentChars > 0) {
      this.completionChars += c.contentChars;
      this.deltaCount++;
    }
    if (this.spliceHeadCreated !== this.created) {
      this.spliceHeadCreated = this.created;
      this.spliceHead = `${this.chunkHead}${this.created},"model":${this.aliasJson},"choices":`;
    }
    return this.spliceHead + c.choices + '}\n\n';
  }

  private rewriteChunk(chunk: Record<string, unknown>): string {
    if (typeof chunk.created === 'number') this.created = chunk.created;
    const usage = readUsage(chunk.usage);
    if (usage) this.providerUsage = usage;
    if (!Array.isArray(chunk.choices) || chunk.choices.length === 0) return '';
    const choices = [];
    for (const c of chunk.choices) {
      if (!isObject(c)) continue;
      this.count(c.delta);
      const delta = cleanMessage(c.delta);
      const finish = typeof c.finish_reason === 'string' ? c.finish_reason : null;
      if (finish !== null) this.finished = true;
      if (Object.keys(delta).length === 0 && finish === null) continue; // reasoning-only chunk
      choices.push({ index: typeof c.index === 'number' ? c.index : 0, delta, finish_reason: finish });
    }
    if (!choices.length) return '';
    return frame({ id: this.requestId, object: 'chat.completion.chunk', created: this.created, model: this.ctx.resolved.alias, choices });
  }

  private count(delta: unknown): void {
    if (!isObject(delta)) return;
    let chars = 0;
    for (const f of ['content', 'refusal'] as const) {
      const v = delta[f];
      if (typeof v === 'string') chars += v.length;
    }
    for (const r of reasoningOf(delta)) chars += r.length;
    if (Array.isArray(delta.tool_calls)) {
      for (const t of delta.tool_calls) {
        if (isObject(t) && isObject(t.function) && typeof t.function.arguments === 'string') chars += t.function.arguments.length;
      }
    }
    if (chars > 0) {
      this.completionChars += chars;
      this.deltaCount++;
    }
  }

  private finalChunk(): string {
    this.closed = true;
    return frame({
      id: this.requestId,
      object: 'chat.completion.chunk',
      created: this.created,
      model: this.ctx.resolved.alias,
      choices: [],
      usage: usageJson(this.usage()),
      [this.brand]: svcBlock(this.ctx, this.requestId),
    });
  }

  /** The provider failed mid-stream (or the gateway is stopping): one error event in the envelope, then the end. */
  fail(reason: ErrorEntry = Errors.upstreamError): string {
    if (this.closed) return '';
    this.closed = true;
    this.failed = true;
    return frame(envelope(gatewayError(reason), this.requestId));
  }
}
