/**
 * Checks on a request body that must run before (or instead of) anything
 * recursive: how deep it nests, read from the bytes without parsing (with
 * where its top-level members lie, in the same pass), and keys that poison an
 * object's prototype in the provider's JSON parser.
 */

/** Deepest nesting of objects and arrays a request body may have. */
export const MAX_JSON_DEPTH = 64;

const OPEN_OBJECT = 0x7b; // {
const OPEN_ARRAY = 0x5b; // [
const CLOSE_OBJECT = 0x7d; // }
const CLOSE_ARRAY = 0x5d; // ]
const QUOTE = 0x22; // "
const BACKSLASH = 0x5c; // \
const COLON = 0x3a; // :
const COMMA = 0x2c; // ,

/** Byte classes: what opens or closes a string, an object or an array; JSON's white space; everything else (0). */
const STRUCTURE = 1;
const SPACE = 2;
const BYTE_CLASS = new Uint8Array(256);
for (const b of [QUOTE, OPEN_OBJECT, OPEN_ARRAY, CLOSE_OBJECT, CLOSE_ARRAY]) BYTE_CLASS[b] = STRUCTURE;
for (const b of [0x20, 0x0a, 0x0d, 0x09]) BYTE_CLASS[b] = SPACE;

/** Where a top-level member's value lies in the body: [start, end) byte offsets, whitespace around it excluded. */
export type Span = readonly [start: number, end: number];

/** What one pass over a body's bytes found (see scanBody). */
export interface BodyScan {
  /** It nests objects and arrays deeper than the limit. */
  readonly tooDeep: boolean;
  /**
   * The top-level object's members, by key, each at its value's bytes (a
   * repeated key at its last occurrence, as JSON.parse keeps it). null when
   * the top level is not an object, a key is written with an escape (its
   * bytes are not its name), the scan stopped early or was not asked for
   * them (`wants.members`). Meaningful only for a body that JSON.parse accepted.
   */
  readonly members: ReadonlyMap<string, Span> | null;
  /**
   * When asked for a top-level member that is an array of objects (`wants.itemsOf`):
   * each element's members, in order, as `members` for the top level. null
   * when it was not asked for, an element is not an object or has a key
   * written with an escape; empty when there is no such member.
   */
  readonly items: ReadonlyArray<ReadonlyMap<string, Span>> | null;
}

/** The members of one object, read as the scan passes over it. */
class MemberReader {
  readonly members = new Map<string, Span>();
  /** A key was written with an escape: its bytes are not its name. */
  escaped = false;
  /** The member being read (null between members). */
  key: string | null = null;
  private start = -1;
  private last = -1;

  /** A string directly inside this object: a key, or a value. */
  string(bytes: Buffer, open: number, close: number): void {
    if (this.key !== null) return this.value(open, close);
    const name = bytes.subarray(open + 1, close);
    if (name.includes(BACKSLASH)) this.escaped = true;
    this.key = name.toString('utf8');
  }

  /** Bytes from..to (inclusive) of the current member's value. */
  value(from: number, to: number): void {
    if (this.start < 0) this.start = from;
    this.last = to;
  }

  /** A comma, or the object's end: the current member is complete. */
  end(): void {
    if (this.key !== null && this.start >= 0) this.members.set(this.key, [this.start, this.last + 1]);
    this.key = null;
    this.start = -1;
  }
}

/** Strings up to this long are read byte by byte: for a key or a role, a call into indexOf costs more than it saves. */
const SHORT_STRING = 32;

/**
 * The end of the string whose opening quote is at `open`: the index of its
 * closing quote (-1 if none). A short string is read byte by byte; a longer
 * one by jumping from quote to quote (a memchr, not a loop over every byte
 * of the text), where a quote after an odd run of backslashes is part of it.
 */
function closingQuote(bytes: Buffer, open: number): number {
  let i = open + 1;
  const stop = Math.min(bytes.length, i + SHORT_STRING);
  for (; i < stop; i++) {
    const b = bytes[i];
    if (b === BACKSLASH) i++;
    else if (b === QUOTE) return i;
  }
  let q = i - 1;
  for (;;) {
    q = bytes.indexOf(QUOTE, q + 1);
    if (q < 0) return -1;
    let slashes = 0;
    while (bytes[q - 1 - slashes] === BACKSLASH) slashes++;
    if (slashes % 2 === 0) return q;
  }
}

/** What scanBody reads besides the depth. */
export interface ScanWants {
  /** The top-level object's members (BodyScan.members). */
  readonly members?: boolean;
  /** The members of the objects in this top-level array (BodyScan.items). */
  readonly itemsOf?: string;
}

/**
 * One pass over a JSON text, no recursion, strings skipped: how deep it nests
 * (before anything recursive runs on it) and where the top-level members'
 * values lie, and optionally those of the objects in one top-level array
 * (so what goes on unchanged can be sent as its own bytes instead of being
 * serialised again: upstream-body.ts, embeddings-response.ts).
 */
export function scanBody(bytes: Buffer, maxDepth: number, wants: ScanWants = {}): BodyScan {
  const withMembers = wants.members === true;
  const itemsOf = wants.itemsOf;
  let depth = 0;
  let first = true;
  // The top-level object (depth 1), the elements of its `itemsOf` array (depth 3 inside them).
  let top: MemberReader | null = null;
  let items: MemberReader[] | null = itemsOf === undefined ? null : [];
  let inItems = false;
  let item: MemberReader | null = null;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i] as number;
    const kind = BYTE_CLASS[b];
    if (kind === SPACE) continue;
    if (kind !== STRUCTURE) {
      // A number, a literal, a comma or a colon: only where members are read.
      const reader = depth === 1 ? top : depth === 3 ? item : null;
      if (reader) {
        if (b === COMMA) reader.end();
        else if (b !== COLON) reader.value(i, i);
      } else if (depth === 2 && inItems && b !== COMMA) items = null; // an element that is not an object
      continue;
    }
    if (first) {
      first = false;
      if (b === OPEN_OBJECT && (withMembers || items)) top = new MemberReader();
    }
    if (b === QUOTE) {
      const close = closingQuote(bytes, i);
      if (close < 0) return { tooDeep: false, members: null, items: null };
      if (depth === 1) top?.string(bytes, i, close);
      else if (depth === 3) item?.string(bytes, i, close);
      else if (depth === 2 && inItems) items = null; // an element that is not an object
      i = close;
    } else if (b === OPEN_OBJECT || b === OPEN_ARRAY) {
      if (depth === 1 && top) {
        top.value(i, i);
        // The array asked for begins (again, for a repeated key: the last one counts).
        if (b === OPEN_ARRAY && top.key === itemsOf) {
          items = [];
          inItems = true;
        }
      } else if (depth === 2 && inItems && items) {
        if (b === OPEN_OBJECT) items.push((item = new MemberReader()));
        else items = null;
      } else if (depth === 3) item?.value(i, i);
      if (++depth > maxDepth) return { tooDeep: true, members: null, items: null };
    } else {
      depth--;
      if (depth === 0) top?.end();
      else if (depth === 1) {
        top?.value(i, i);
        inItems = false;
      } else if (depth === 2 && inItems) {
        item?.end();
        item = null;
      } else if (depth === 3) item?.value(i, i);
    }
  }
  return {
    tooDeep: false,
    members: withMembers && top && !top.escaped ? top.members : null,
    items: items && !items.some((r) => r.escaped) ? items.map((r) => r.members) : null,
  };
}

const poisons = (key: string, child: unknown): boolean =>
  key === '__proto__' || (key === 'constructor' && typeof child === 'object' && child !== null && Object.hasOwn(child, 'prototype'));

/**
 * Whether the raw body could spell a poisoning key at all: `__proto__` or
 * `constructor` literally, or any `\u` escape (which could spell either). A
 * byte search, so most bodies skip the walk of poisonedField entirely.
 */
export function mayBePoisoned(bytes: Buffer): boolean {
  return bytes.includes('__proto__') || bytes.includes('constructor') || bytes.includes('\\u');
}

/**
 * The top-level field holding a `__proto__` key, or a `constructor` object
 * carrying `prototype`, anywhere in a parsed body (`__proto__` itself when it
 * is at the top); null when there is none. Providers' JSON parsers refuse
 * these, so the gateway refuses them instead of sending them up. Only the
 * top-level field is returned (deeper key names are never looked at); a
 * top-level name can be the caller's text too, so admitBody names it in an
 * error only when it is one of the request fields it knows.
 */
export function poisonedField(body: unknown): string | null {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return null;
  for (const [field, value] of Object.entries(body)) {
    if (poisons(field, value)) return field;
    const stack: unknown[] = [value];
    while (stack.length) {
      const v = stack.pop();
      if (typeof v !== 'object' || v === null) continue;
      for (const [key, child] of Object.entries(v)) {
        if (!Array.isArray(v) && poisons(key, child)) return field;
        stack.push(child);
      }
    }
  }
  return null;
}
