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

export function scanDeltaChunk(data: string): ChunkSpans | null {
  // Anything that needs the full treatment is sent there: reasoning to strip, usage, errors.
  if (data.includes('reasoning') || data.includes('"error"')) return null;
  let i = skipWs(data, 0);
  if (data[i] !== '{') return null;
  i = skipWs(data, i + 1);
  let choices: string | null = null;
  let created: number | null = null;
  while (i < data.length && data[i] !== '}') {
    if (data[i] !== '"') return null;
    const keyEnd = skipString(data, i);
    if (keyEnd < 0) return null;
    const key = data.slice(i + 1, keyEnd - 1);
    i = skipWs(data, keyEnd);
    if (data[i] !== ':') return null;
    const start = skipWs(data, i + 1);
    const end = skipValue(data, start);
    if (end < 0) return null;
    const value = data.slice(start, end);
    if (!DROPPED.has(key)) return null;
    if (key === 'usage' && value !== 'null') return null;
    if (key === 'choices') choices = value;
    if (key === 'created') {
      if (!/^\d{1,12}$/.test(value)) return null;
      created = Number(value);
    }
    i = skipWs(data, end);
    if (data[i] === ',') i = skipWs(data, i + 1);
    else if (data[i] !== '}') return null;
  }
  if (data[i] !== '}' || skipWs(data, i + 1) !== data.length) return null;
  if (choices === null || choices[0] !== '[' || choices[skipWs(choices, 1)] !== '{') return null;
  return { choices, created, contentChars: contentChars(choices) };
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
