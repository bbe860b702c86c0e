import { MESSAGE_FIELDS } from '../chat-response.js';

/**
 * A byte-level look at one chat.completion.chunk: the spans of its top-level
 * members, found without building any objects. Lets the stream rewriter emit
 * an ordinary delta chunk by splicing the caller's id and alias around the
 * provider's `choices` text instead of parsing and re-serialising it.
 * Returns null whenever the chunk is not plainly a delta chunk (then the full
 * parse handles it): anything unexpected, malformed, or not ASCII-keyed.
 */
export interface ChunkSpans {
  /** Raw JSON of `choices` (an array). */
  readonly choices: string;
  /** `created`, if present and a plain integer. */
  readonly created: number | null;
  /** Characters of content in the deltas (for usage estimates). */
  readonly contentChars: number;
}

/** Top-level members a plain delta chunk may carry; their values are dropped or replaced. */
const DROPPED = ['id', 'object', 'model', 'system_fingerprint', 'service_tier', 'created', 'choices', 'usage'];

const QUOTE = 34; // "
const BACKSLASH = 92;
const OPEN_BRACE = 123;
const CLOSE_BRACE = 125;
const OPEN_BRACKET = 91;
const CLOSE_BRACKET = 93;
const COLON = 58;
const COMMA = 44;

/** JSON whitespace (charCodeAt past the end is NaN: not whitespace). */
const isWs = (c: number): boolean => c === 32 || c === 10 || c === 13 || c === 9;

/** Index just past the string starting at `i` (a quote), or -1. */
function skipString(s: string, i: number): number {
  for (let j = i + 1; j < s.length; j++) {
    const c = s.charCodeAt(j);
    if (c === BACKSLASH) j++;
    else if (c === QUOTE) return j + 1;
  }
  return -1;
}

/** Index just past the value starting at `i` (after whitespace), or -1. */
function skipValue(s: string, i: number): number {
  const c = s.charCodeAt(i);
  if (c === QUOTE) return skipString(s, i);
  if (c === OPEN_BRACE || c === OPEN_BRACKET) {
    let depth = 0;
    for (let j = i; j < s.length; j++) {
      const d = s.charCodeAt(j);
      if (d === QUOTE) {
        j = skipString(s, j) - 1;
        if (j < 0) return -1;
      } else if (d === OPEN_BRACE || d === OPEN_BRACKET) depth++;
      else if (d === CLOSE_BRACE || d === CLOSE_BRACKET) {
        depth--;
        if (depth === 0) return j + 1;
      }
    }
    return -1;
  }
  let j = i;
  for (; j < s.length; j++) {
    const d = s.charCodeAt(j);
    if (d === COMMA || d === CLOSE_BRACE || d === CLOSE_BRACKET || isWs(d)) break;
  }
  return j > i ? j : -1;
}

const skipWs = (s: string, i: number): number => {
  while (isWs(s.charCodeAt(i))) i++;
  return i;
};

/**
 * Walks the members of the object starting at `i` (a `{`): calls `member` with
 * the span of each key (inside its quotes) and of its value; stops at the first
 * false. Returns the index just past the object, or -1 when it is malformed or
 * a member was refused. Keys are compared in place (keyIs), never sliced out.
 */
function walkObject(s: string, i: number, member: (keyStart: number, keyEnd: number, start: number, end: number) => boolean): number {
  if (s.charCodeAt(i) !== OPEN_BRACE) return -1;
  i = skipWs(s, i + 1);
  while (i < s.length && s.charCodeAt(i) !== CLOSE_BRACE) {
    if (s.charCodeAt(i) !== QUOTE) return -1;
    const keyEnd = skipString(s, i);
    if (keyEnd < 0) return -1;
    const keyStart = i + 1;
    i = skipWs(s, keyEnd);
    if (s.charCodeAt(i) !== COLON) return -1;
    const start = skipWs(s, i + 1);
    const end = skipValue(s, start);
    if (end < 0 || !member(keyStart, keyEnd - 1, start, end)) return -1;
    i = skipWs(s, end);
    if (s.charCodeAt(i) === COMMA) i = skipWs(s, i + 1);
    else if (s.charCodeAt(i) !== CLOSE_BRACE) return -1;
  }
  return s.charCodeAt(i) === CLOSE_BRACE ? i + 1 : -1;
}

/** s[start, end) is exactly `name`. */
const keyIs = (s: string, start: number, end: number, name: string): boolean => end - start === name.length && s.startsWith(name, start);

/** s[start, end) is one of `names`. */
function keyIn(s: string, start: number, end: number, names: readonly string[]): boolean {
  for (const name of names) if (keyIs(s, start, end, name)) return true;
  return false;
}

/** Choice and delta members the caller gets (the same rule as the parsing path's cleanMessage). */
const CHOICE_KEYS = ['index', 'delta', 'finish_reason', 'logprobs'];
const DELTA_KEYS: readonly string[] = [...MESSAGE_FIELDS];

/** True when `choices` (an array's raw JSON) has only objects with known members and deltas with message fields. */
function plainChoices(choices: string): boolean {
  let i = skipWs(choices, 1);
  for (;;) {
    const end = walkObject(choices, i, (ks, ke, start, stop) => {
      if (!keyIn(choices, ks, ke, CHOICE_KEYS)) return false;
      return !keyIs(choices, ks, ke, 'delta') || walkObject(choices, start, (dks, dke) => keyIn(choices, dks, dke, DELTA_KEYS)) === stop;
    });
    if (end < 0) return false;
    i = skipWs(choices, end);
    if (choices.charCodeAt(i) !== COMMA) break;
    i = skipWs(choices, i + 1);
  }
  return choices.charCodeAt(i) === CLOSE_BRACKET && skipWs(choices, i + 1) === choices.length;
}

export function scanDeltaChunk(data: string): ChunkSpans | null {
  // Anything that needs the full treatment is sent there: reasoning to strip, usage, errors.
  if (data.includes('reasoning') || data.includes('"error"')) return null;
  let choices: string | null = null;
  let created: number | null = null;
  const start = skipWs(data, 0);
  const end = walkObject(data, start, (ks, ke, from, to) => {
    if (!keyIn(data, ks, ke, DROPPED)) return false;
    if (keyIs(data, ks, ke, 'usage')) return to - from === 4 && data.startsWith('null', from);
    if (keyIs(data, ks, ke, 'choices')) choices = data.slice(from, to);
    if (keyIs(data, ks, ke, 'created')) {
      created = plainInteger(data, from, to);
      if (created === null) return false;
    }
    return true;
  });
  if (end < 0 || skipWs(data, end) !== data.length) return null;
  const found = choices as string | null;
  if (found === null || found.charCodeAt(0) !== OPEN_BRACKET || !plainChoices(found)) return null;
  return { choices: found, created, contentChars: contentChars(found) };
}

/** The digits s[from, to) as a number (1 to 12 of them, nothing else), or null. */
function plainInteger(s: string, from: number, to: number): number | null {
  if (to - from < 1 || to - from > 12) return null;
  let n = 0;
  for (let i = from; i < to; i++) {
    const d = s.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return null;
    n = n * 10 + d;
  }
  return n;
}

/** Length of every "content" and "arguments" string value (escaped form: close enough for an estimate). */
function contentChars(choices: string): number {
  return stringValueChars(choices, '"content":"') + stringValueChars(choices, '"arguments":"');
}

function stringValueChars(text: string, marker: string): number {
  let n = 0;
  let from = 0;
  for (;;) {
    const k = text.indexOf(marker, from);
    if (k < 0) return n;
    const start = k + marker.length - 1;
    const end = skipString(text, start);
    if (end < 0) return n;
    n += end - start - 2;
    from = end;
  }
}
