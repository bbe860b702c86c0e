/**
 * Splits a byte stream into Server-Sent Events. Transport chunks are not
 * event boundaries: an event may span chunks, a chunk may hold several
 * events, and a multi-byte character may be cut in two. Bytes are kept
 * until a full event (ended by a blank line) is present; only complete
 * events are decoded. Line endings \n, \r\n and \r are all accepted.
 */
export interface SseEvent {
  /** Joined `data:` lines (without the trailing newline); null if none. */
  readonly data: string | null;
  readonly event: string | null;
}

const LF = 0x0a;
const CR = 0x0d;

export class SseFramer {
  private pending: Buffer = Buffer.alloc(0);

  constructor(private readonly maxEventBytes = 1024 * 1024) {}

  /** Returns the events completed by this chunk. Throws if one event grows past the limit. */
  push(chunk: Buffer): SseEvent[] {
    const buf = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    const events: SseEvent[] = [];
    let start = 0;
    let i = 0;
    let lineStart = 0;
    let lines: string[] = [];
    // The next CR from i on (-1: none left); line ends are found with indexOf, not byte by byte.
    let nextCr = buf.indexOf(CR, i);
    while (i < buf.length) {
      if (nextCr !== -1 && nextCr < i) nextCr = buf.indexOf(CR, i);
      const nextLf = buf.indexOf(LF, i);
      const at = nextCr === -1 ? nextLf : nextLf === -1 ? nextCr : Math.min(nextCr, nextLf);
      if (at === -1) break;
      i = at;
      const b = buf[i];
      // A lone CR at the very end may be the first half of CRLF: wait for more.
      if (b === CR && i + 1 >= buf.length) break;
      const lineEnd = i;
      i += b === CR && buf[i + 1] === LF ? 2 : 1;
      if (lineEnd === lineStart) {
        if (lines.length) events.push(toEvent(lines));
        lines = [];
        start = i;
      } else {
        lines.push(buf.toString('utf8', lineStart, lineEnd));
      }
      lineStart = i;
    }
    this.pending = start < buf.length ? Buffer.from(buf.subarray(start)) : Buffer.alloc(0);
    if (this.pending.length > this.maxEventBytes) throw new Error('SSE event too large');
    return events;
  }

  /** Whatever is left when the stream ends: a last event without its blank line. */
  flush(): SseEvent[] {
    if (!this.pending.length) return [];
    const text = this.pending.toString('utf8');
    this.pending = Buffer.alloc(0);
    const lines = text.split(/\r\n|\r|\n/).filter((l) => l.length > 0);
    return lines.length ? [toEvent(lines)] : [];
  }
}

function toEvent(lines: string[]): SseEvent {
  const data: string[] = [];
  let event: string | null = null;
  for (const line of lines) {
    if (line.startsWith(':')) continue; // comment
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') data.push(value);
    else if (field === 'event') event = value;
  }
  return { data: data.length ? data.join('\n') : null, event };
}
