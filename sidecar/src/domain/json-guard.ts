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
   * them. Meaningful only for a body that JSON.parse accepted.
   */
  readonly members: ReadonlyMap<string, Span> | null;
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

/**
 * One pass over a JSON text, no recursion, strings skipped: how deep it nests
 * (before anything recursive runs on it) and where the top-level members'
 * values lie (so what goes upstream unchanged can be sent as the caller's own
 * bytes instead of serialised again: upstream-body.ts).
 */
export function scanBody(bytes: Buffer, maxDepth: number, withMembers = true): BodyScan {
  let depth = 0;
  let members: Map<string, Span> | null = withMembers ? new Map() : null;
  let first = true;
  // Inside the top-level object: the key being read, where its value began (-1: not yet) and its last byte.
  let key: string | null = null;
  let valueStart = -1;
  let valueLast = -1;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i];
    if (b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09) continue;
    if (first) {
      first = false;
      if (b !== OPEN_OBJECT) members = null;
    }
    if (b === QUOTE) {
      const close = closingQuote(bytes, i);
      if (close < 0) return { tooDeep: false, members: null };
      if (members && depth === 1) {
        if (key === null) {
          // A key: its bytes are its name only when nothing in it is escaped.
          const name = bytes.subarray(i + 1, close);
          if (name.includes(BACKSLASH)) members = null;
          else key = name.toString('utf8');
        } else if (valueStart < 0) valueStart = i;
      }
      valueLast = close;
      i = close;
    } else if (b === OPEN_OBJECT || b === OPEN_ARRAY) {
      if (depth === 1 && valueStart < 0) valueStart = i;
      if (++depth > maxDepth) return { tooDeep: true, members: null };
    } else if (b === CLOSE_OBJECT || b === CLOSE_ARRAY) {
      // The top-level object's end also ends its last member.
      if (--depth > 0) valueLast = i;
      else if (members && key !== null && valueStart >= 0) members.set(key, [valueStart, valueLast + 1]);
    } else if (members && depth === 1) {
      if (b === COMMA) {
        if (key !== null && valueStart >= 0) members.set(key, [valueStart, valueLast + 1]);
        key = null;
        valueStart = -1;
      } else if (b !== COLON) {
        // A number, true, false or null: part of the current value.
        if (valueStart < 0) valueStart = i;
        valueLast = i;
      }
    }
  }
  return { tooDeep: false, members };
}

/** True when the JSON text nests objects/arrays deeper than `max` (one pass, no recursion, strings skipped). */
export function nestsDeeperThan(bytes: Buffer, max: number): boolean {
  return scanBody(bytes, max, false).tooDeep;
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
 * top-level field is named: deeper key names are the caller's text.
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
