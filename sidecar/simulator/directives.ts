/**
 * Directives let a test steer the simulator from inside the request itself,
 * so they pass through a gateway untouched: a token `#sim:<name>[=<value>]`
 * in any chat message content or embeddings input string, or the same
 * tokens (comma-separated, `#sim:` prefix optional) in `x-sim-directive`.
 */

export interface Directives {
  /** Answer this HTTP status (400-599) with an OpenAI error body. */
  status?: number;
  /** 400 context_length_exceeded naming the model. */
  contextOverflow?: boolean;
  /** 200 with an empty body. */
  empty?: boolean;
  /** 200 with a body that is not JSON. */
  garbage?: boolean;
  /** Delay before headers (replaces the configured latency). */
  delayMs?: number;
  /** Destroy the socket without answering. */
  reset?: boolean;
  /** Visible completion tokens. */
  tokens?: number;
  /** Reasoning tokens (reasoning models). */
  reasoning?: number;
  /** Force a call of the first tool. */
  tool?: boolean;
  /** Delay between streamed chunks. */
  chunkDelayMs?: number;
  /** Streaming: destroy the socket after 2 generated chunks. */
  midstreamError?: boolean;
  /** Streaming: send an error event after 2 generated chunks, then end. */
  midstreamErrorEvent?: boolean;
  /** Streaming: end the response cleanly after 2 generated chunks (no finish_reason, no [DONE]). */
  midstreamEnd?: boolean;
  /** Streaming: after 2 generated chunks send one that is not JSON (a raw control character in its content), then end. */
  midstreamMalformed?: boolean;
  /** Streaming: generated chunks before a midstream failure acts (default 2; 0: right after the headers). */
  failAfter?: number;
  /** Streaming: headers at once, then this long before the first chunk (a provider's prefill). */
  prefillMs?: number;
  /** Never send usage, even when asked. */
  noUsage?: boolean;
  /** Streaming: usage rides on the finish_reason chunk instead of its own chunk. */
  usageInFinish?: boolean;
  /** Streaming: after 2 generated chunks stop sending, keep the connection open. */
  hang?: boolean;
  /** Add `retry-after: <seconds>` to error answers. */
  retryAfter?: number;
  /**
   * Streaming: write the stream in uneven slices like a real provider (`sliced`):
   * 1 to `slice-max` bytes (default 500) every `slice-gap` ms (default 1), cut
   * anywhere, sizes from the seed `slice-seed` (default: the next of the
   * simulator's own sequence 1, 2, 3, ...). Any slice-* directive implies `sliced`.
   */
  sliced?: boolean;
  sliceSeed?: number;
  sliceMaxBytes?: number;
  sliceGapMs?: number;
}

export const NO_DIRECTIVES: Readonly<Directives> = Object.freeze({});

export const DIRECTIVE_NAMES = [
  'status', 'context-overflow', 'empty', 'garbage', 'delay', 'reset', 'tokens', 'reasoning', 'tool',
  'chunk-delay', 'midstream-error', 'midstream-error-event', 'midstream-end', 'midstream-malformed', 'fail-after', 'prefill', 'no-usage', 'usage-in-finish', 'hang',
  'retry-after', 'sliced', 'slice-seed', 'slice-max', 'slice-gap',
] as const;

const MARK = '#sim:';
const TOKEN = /#sim:([a-z][a-z-]*[a-z])(?:=([^\s,"'#]*))?/gi;

function int(value: string | undefined): number | undefined {
  if (value === undefined || !/^\d{1,9}$/.test(value)) return undefined;
  return Number(value);
}

function apply(d: Directives, name: string, value: string | undefined): void {
  switch (name.toLowerCase()) {
    case 'status': {
      const s = int(value);
      if (s !== undefined && s >= 400 && s <= 599) d.status = s;
      break;
    }
    case 'context-overflow': d.contextOverflow = true; break;
    case 'empty': d.empty = true; break;
    case 'garbage': d.garbage = true; break;
    case 'delay': d.delayMs = int(value) ?? d.delayMs; break;
    case 'reset': d.reset = true; break;
    case 'tokens': d.tokens = int(value) ?? d.tokens; break;
    case 'reasoning': d.reasoning = int(value) ?? d.reasoning; break;
    case 'tool': d.tool = true; break;
    case 'chunk-delay': d.chunkDelayMs = int(value) ?? d.chunkDelayMs; break;
    case 'midstream-error': d.midstreamError = true; break;
    case 'midstream-error-event': d.midstreamErrorEvent = true; break;
    case 'midstream-malformed': d.midstreamMalformed = true; break;
    case 'midstream-end': d.midstreamEnd = true; break;
    case 'fail-after': d.failAfter = int(value) ?? d.failAfter; break;
    case 'prefill': d.prefillMs = int(value) ?? d.prefillMs; break;
    case 'no-usage': d.noUsage = true; break;
    case 'usage-in-finish': d.usageInFinish = true; break;
    case 'hang': d.hang = true; break;
    case 'retry-after': d.retryAfter = int(value) ?? d.retryAfter; break;
    case 'sliced': d.sliced = true; break;
    case 'slice-seed': d.sliced = true; d.sliceSeed = int(value) ?? d.sliceSeed; break;
    case 'slice-max': {
      d.sliced = true;
      const n = int(value);
      if (n !== undefined && n >= 1) d.sliceMaxBytes = n;
      break;
    }
    case 'slice-gap': d.sliced = true; d.sliceGapMs = int(value) ?? d.sliceGapMs; break;
    default: break; // unknown directives are ignored
  }
}

/**
 * Collects directives from texts; allocates nothing until one is found, so
 * the common request without directives stays cheap.
 */
export class DirectiveScanner {
  private found: Directives | null = null;

  text(s: string): void {
    if (!s.includes(MARK)) return;
    this.found ??= {};
    for (const m of s.matchAll(TOKEN)) apply(this.found, m[1] ?? '', m[2]);
  }

  header(value: string | string[] | undefined): void {
    if (value === undefined) return;
    for (const v of Array.isArray(value) ? value : [value]) {
      for (const part of v.split(',')) {
        const p = part.trim();
        if (p) this.text(p.startsWith(MARK) ? p : MARK + p);
      }
    }
  }

  result(): Readonly<Directives> {
    return this.found ?? NO_DIRECTIVES;
  }
}
