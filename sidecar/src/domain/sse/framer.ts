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
const COLON = 0x3a;
const SPACE = 0x20;
const EMPTY = Buffer.alloc(0);

/** buf[from, from + name.length) is `name` (ASCII). */
function bytesAre(buf: Buffer, from: number, to: number, name: string): boolean {
  if (to - from !== name.length) return false;
  for (let k = 0; k < name.length; k++) if (buf[from + k] !== name.charCodeAt(k)) return false;
  return true;
}

export class SseFramer {
  private pending: Buffer = EMPTY;

  constructor(private readonly maxEventBytes = 1024 * 1024) {}

  /** Returns the events completed by this chunk. Throws if one event grows past the limit. */
  push(chunk: Buffer): SseEvent[] {
    const buf = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    const events: SseEvent[] = [];
    let start = 0;
    let i = 0;
    let lineStart = 0;
    // The block being read: its lines so far (a block of comments only is still an event),
    // its joined data lines and its event name. Each value is decoded straight from the bytes.
    let lines = 0;
    let data: string | null = null;
    let event: string | null = null;
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
        if (lines) events.push({ data, event });
        lines = 0;
        data = null;
        event = null;
        start = i;
      } else {
        lines++;
        // "field: value" (one space dropped), or a bare field with an empty value. A comment
        // starts with the colon: its field is empty, so it is neither data nor event.
        // Looked for within the line only (a search to the buffer's end per line would be
        // quadratic in a provider's lines without a colon).
        let colon = lineStart;
        while (colon < lineEnd && buf[colon] !== COLON) colon++;
        const hasValue = colon < lineEnd;
        const fieldEnd = hasValue ? colon : lineEnd;
        let valueStart = fieldEnd;
        if (hasValue) valueStart = buf[colon + 1] === SPACE ? colon + 2 : colon + 1;
        if (bytesAre(buf, lineStart, fieldEnd, 'data')) {
          const value = buf.toString('utf8', valueStart, lineEnd);
          data = data === null ? value : `${data}\n${value}`;
        } else if (bytesAre(buf, lineStart, fieldEnd, 'event')) event = buf.toString('utf8', valueStart, lineEnd);
      }
      lineStart = i;
    }
    this.pending = start < buf.length ? Buffer.from(buf.subarray(start)) : EMPTY;
    if (this.pending.length > this.maxEventBytes) throw new Error('SSE event too large');
    return events;
  }

  /** Whatever is left when the stream ends: a last event without its blank line. */
  flush(): SseEvent[] {
    if (!this.pending.length) return [];
    // Read as if the stream had ended its last line and then the block.
    const text = this.pending.toString('utf8').replace(/(\r\n|\r|\n)$/, '');
    this.pending = EMPTY;
    return this.push(Buffer.from(`${text}\n\n`));
  }
}
