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
const DROPPED = new Set(['id', 'object', 'model', 'system_fingerprint', 'service_tier', 'created', 'choices', 'usage']);

const QUOTE = 34; // "
const BACKSLASH = 92;

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
  const c = s[i];
  if (c === '"') return skipString(s, i);
  if (c === '{' || c === '[') {
    let depth = 0;
    for (let j = i; j < s.length; j++) {
      const d = s.charCodeAt(j);
      if (d === QUOTE) {
        j = skipString(s, j) - 1;
        if (j < 0) return -1;
      } else if (d === 123 || d === 91) depth++;
      else if (d === 125 || d === 93) {
        depth--;
        if (depth === 0) return j + 1;
      }
    }
    return -1;
  }
  let j = i;
  while (j < s.length && !',}] \n\r\t'.includes(s[j] as string)) j++;
  return j > i ? j : -1;
}

const skipWs = (s: string, i: number): number => {
  while (i < s.length && (s[i] === ' ' || s[i] === '\n' || s[i] === '\r' || s[i] === '\t')) i++;
  return i;
};

/**
 * Walks the members of the object starting at `i` (a `{`): calls `member` with
 * each key and the span of its value; stops at the first false. Returns the
 * index just past the object, or -1 when it is malformed or a member was refused.
 */
function walkObject(s: string, i: number, member: (key: string, start: number, end: number) => boolean): number {
  if (s[i] !== '{') return -1;
  i = skipWs(s, i + 1);
  while (i < s.length && s[i] !== '}') {
    if (s[i] !== '"') return -1;
    const keyEnd = skipString(s, i);
    if (keyEnd < 0) return -1;
    const key = s.slice(i + 1, keyEnd - 1);
    i = skipWs(s, keyEnd);
    if (s[i] !== ':') return -1;
    const start = skipWs(s, i + 1);
    const end = skipValue(s, start);
    if (end < 0 || !member(key, start, end)) return -1;
    i = skipWs(s, end);
    if (s[i] === ',') i = skipWs(s, i + 1);
    else if (s[i] !== '}') return -1;
  }
  return s[i] === '}' ? i + 1 : -1;
}

/** Choice and delta members the caller gets (the same rule as the parsing path's cleanMessage). */
const CHOICE_KEYS = new Set(['index', 'delta', 'finish_reason', 'logprobs']);
const DELTA_KEYS = new Set<string>(MESSAGE_FIELDS);

/** True when `choices` (an array's raw JSON) has only objects with known members and deltas with message fields. */
function plainChoices(choices: string): boolean {
  let i = skipWs(choices, 1);
  for (;;) {
    const end = walkObject(choices, i, (key, start, stop) => {
      if (!CHOICE_KEYS.has(key)) return false;
      return key !== 'delta' || walkObject(choices, start, (k) => DELTA_KEYS.has(k)) === stop;
    });
    if (end < 0) return false;
    i = skipWs(choices, end);
    if (choices[i] !== ',') break;
    i = skipWs(choices, i + 1);
  }
  return choices[i] === ']' && skipWs(choices, i + 1) === choices.length;
}

export function scanDeltaChunk(data: string): ChunkSpans | null {
  // Anything that needs the full treatment is sent there: reasoning to strip, usage, errors.
  if (data.includes('reasoning') || data.includes('"error"')) return null;
  let choices: string | null = null;
  let created: number | null = null;
  const start = skipWs(data, 0);
  const end = walkObject(data, start, (key, from, to) => {
    const value = data.slice(from, to);
    if (!DROPPED.has(key)) return false;
    if (key === 'usage') return value === 'null';
    if (key === 'choices') choices = value;
    if (key === 'created') {
      if (!/^\d{1,12}$/.test(value)) return false;
      created = Number(value);
    }
    return true;
  });
  if (end < 0 || skipWs(data, end) !== data.length) return null;
  const found = choices as string | null;
  if (found === null || found[0] !== '[' || !plainChoices(found)) return null;
  return { choices: found, created, contentChars: contentChars(found) };
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
