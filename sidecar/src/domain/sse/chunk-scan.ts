import { MESSAGE_FIELDS } from '../chat-response.js';

/**
 * A byte-level look at one chat.completion.chunk: the spans of its top-level
 * members, found without building any objects. Lets the stream rewriter emit
 * an ordinary delta chunk by splicing the caller's id and alias around the
 * provider's `choices` text instead of parsing and re-serialising it.
 * Returns null whenever the chunk is not plainly a delta chunk (then the full
 * parse handles it): anything unexpected, malformed, or not ASCII-keyed.
 *
 * One pass: `choices` is checked member by member where the top level meets
 * it, and the content size and finish_reason are read on the way, so no part
 * of the chunk is scanned twice (strings are skipped with indexOf, not
 * character by character).
 *
 * Sound: whenever it answers, the chunk is valid JSON and `choices` is exactly
 * what a parse finds. Strings and escapes are checked for the whole chunk at
 * once (NOT_PLAIN), literals and numbers where they stand, and a nested value
 * the walk does not enter (tool calls, logprobs) by parsing that value alone.
 */
export interface ChunkSpans {
  /** Raw JSON of `choices` (an array). */
  readonly choices: string;
  /** `created`, if present and a plain integer. */
  readonly created: number | null;
  /** Characters of content in the deltas (for usage estimates). */
  readonly contentChars: number;
  /** A choice carries a finish_reason string (not null): the answer is complete. */
  readonly finished: boolean;
  /** This chunk's members before its `choices`, for the next chunk of the stream (see ChunkPrefix). */
  readonly prefix: ChunkPrefix;
  /** This chunk around its content text, for the next chunk of the stream (see ChunkTemplate); null: it has no content string. */
  readonly template: ChunkTemplate | null;
}

/**
 * The text of a chunk up to the value of its (last) `choices`, after the chunk
 * was scanned whole and found plain, with the `created` it carried there. A
 * provider writes the same members before `choices` in every chunk of a
 * stream (id, object, created, model, system fingerprint), so a later chunk
 * that starts with exactly these characters has them checked already: only
 * what follows is scanned, with the same result a whole scan would give.
 */
export interface ChunkPrefix {
  readonly text: string;
  readonly created: number | null;
}

/**
 * A chunk scanned and found plain, cut around the text of its (last) content
 * string: `head` runs to the string's opening quote, `tail` from its closing
 * quote. A provider writes the delta chunks of a stream alike but for that
 * text (and its prefix alike, see ChunkPrefix): a later chunk that is `head`,
 * then text with no quote, backslash or control character (nor the word
 * NOT_PLAIN refuses), then `tail`, is the same valid chunk with other words,
 * and a whole scan would find the same spans in it: they are taken from here,
 * with no scan at all.
 */
export interface ChunkTemplate {
  readonly head: string;
  readonly tail: string;
  /** Where `choices` starts (within head) and how far from the end it stops (within tail). */
  readonly choicesAt: number;
  readonly choicesFromEnd: number;
  readonly created: number | null;
  readonly finished: boolean;
  /** Content characters counted outside the content string (other choices, tool-call arguments). */
  readonly fixedChars: number;
  /** The prefix of the chunk it was cut from (head starts with it). */
  readonly prefix: ChunkPrefix;
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

/**
 * Sent to the full parse whole: reasoning to strip, an error, any control
 * character (raw inside a string it is not JSON; a line break would also end
 * the caller's `data:` line; as whitespace it is merely rare), or a backslash
 * that does not start a valid escape (a run of them is read pair by pair).
 */
const NOT_PLAIN = /reasoning|"error"|[\x00-\x1f]|(?<!\\)(?:\\\\)*\\(?!["\\/bfnrt]|u[0-9a-fA-F]{4})/;
/** The same, searched from `lastIndex` (what follows a known prefix; its lookbehind still sees the prefix). */
const NOT_PLAIN_FROM = new RegExp(NOT_PLAIN.source, 'g');

/** A JSON number, exactly (sticky: tried where a value starts). */
const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;

/** Whitespace between tokens: only the space is left once NOT_PLAIN has passed (charCodeAt past the end is NaN). */
const isWs = (c: number): boolean => c === 32;

const skipWs = (s: string, i: number): number => {
  while (isWs(s.charCodeAt(i))) i++;
  return i;
};

/** Index just past the string starting at `i` (a quote), or -1. */
function skipString(s: string, i: number): number {
  for (let from = i + 1; ; ) {
    const q = s.indexOf('"', from);
    if (q < 0) return -1;
    // Escaped when an odd number of backslashes stands right before it.
    let b = q - 1;
    while (s.charCodeAt(b) === BACKSLASH) b--;
    if ((q - 1 - b) % 2 === 0) return q + 1;
    from = q + 1;
  }
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
  return isLiteral(s, i, j) ? j : -1;
}

/** s[from, to) is true, false, null or a number. */
function isLiteral(s: string, from: number, to: number): boolean {
  const n = to - from;
  if (n === 4 && (s.startsWith('true', from) || s.startsWith('null', from))) return true;
  if (n === 5 && s.startsWith('false', from)) return true;
  NUMBER.lastIndex = from;
  return NUMBER.test(s) && NUMBER.lastIndex === to;
}

/**
 * Index just past the value at `i`, checked: an object or array the walk does
 * not enter (tool calls, logprobs) is parsed alone, so no malformed nesting
 * passes through untouched.
 */
function checkedValue(s: string, i: number): number {
  const end = skipValue(s, i);
  const c = s.charCodeAt(i);
  if (end > 0 && (c === OPEN_BRACE || c === OPEN_BRACKET)) {
    try {
      JSON.parse(s.slice(i, end));
    } catch {
      return -1;
    }
  }
  return end;
}

/**
 * The members of one JSON object, in order: `next()` finds a key and where its
 * value starts; the caller finds where the value ends (skipping it or checking
 * it on the way) and hands that to `endValue()`. `end` is the index just past
 * the object once `next()` has returned false, or -1 when it is malformed.
 */
class Members {
  keyStart = 0;
  keyEnd = 0;
  valueStart = 0;
  end = -1;
  private i: number;

  constructor(
    private readonly s: string,
    at: number,
  ) {
    this.i = s.charCodeAt(at) === OPEN_BRACE ? skipWs(s, at + 1) : -1;
  }

  next(): boolean {
    const s = this.s;
    let i = this.i;
    if (i < 0) return false;
    const c = s.charCodeAt(i);
    if (c === CLOSE_BRACE) {
      this.end = i + 1;
      return false;
    }
    if (c !== QUOTE) return this.malformed();
    const keyEnd = skipString(s, i);
    if (keyEnd < 0) return this.malformed();
    this.keyStart = i + 1;
    this.keyEnd = keyEnd - 1;
    i = skipWs(s, keyEnd);
    if (s.charCodeAt(i) !== COLON) return this.malformed();
    this.valueStart = skipWs(s, i + 1);
    return true;
  }

  /** The current value ends just before `at` (-1: it is malformed or refused). */
  endValue(at: number): boolean {
    const s = this.s;
    if (at < 0) return this.malformed();
    let i = skipWs(s, at);
    const c = s.charCodeAt(i);
    if (c === COMMA) {
      i = skipWs(s, i + 1);
      if (s.charCodeAt(i) !== QUOTE) return this.malformed(); // a trailing comma
    } else if (c !== CLOSE_BRACE) return this.malformed();
    this.i = i;
    return true;
  }

  private malformed(): false {
    this.i = -1;
    this.end = -1;
    return false;
  }
}

/**
 * `s` begins (ends) with `part`, for a part that is not a constant: a chunk's
 * known head or tail, 40 to 200 characters. String.prototype.startsWith and
 * endsWith compare such a part character by character (about 1 µs for a
 * chunk's head and tail on the 2-core box); a slice compared with === is one
 * block compare (0.13 to 0.23 µs; 2026-11-29, docs/benchmark.md session 28).
 */
const beginsWith = (s: string, part: string): boolean => s.length >= part.length && s.slice(0, part.length) === part;
const finishesWith = (s: string, part: string): boolean => s.length >= part.length && s.slice(s.length - part.length) === part;

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

/** What reading `choices` found; `end` is the index just past it, -1 when it is not plain. */
interface ChoicesScan {
  end: number;
  contentChars: number;
  finished: boolean;
  /** The last content string's opening quote and the index just past its closing one (-1: none). */
  contentAt: number;
  contentEnd: number;
}

/**
 * Checks the array at `i` holds only objects with known members and deltas
 * with message fields, counting content and noting a finish_reason on the way.
 */
function scanChoices(s: string, i: number, out: ChoicesScan): void {
  out.end = -1;
  if (s.charCodeAt(i) !== OPEN_BRACKET) return;
  i = skipWs(s, i + 1);
  for (;;) {
    const choice = new Members(s, i);
    while (choice.next()) {
      const { keyStart: ks, keyEnd: ke, valueStart: v } = choice;
      let end: number;
      if (keyIs(s, ks, ke, 'delta')) end = scanDelta(s, v, out);
      else if (keyIn(s, ks, ke, CHOICE_KEYS)) {
        end = checkedValue(s, v);
        if (end > 0 && s.charCodeAt(v) === QUOTE && keyIs(s, ks, ke, 'finish_reason')) out.finished = true;
      } else end = -1;
      if (!choice.endValue(end)) return;
    }
    if (choice.end < 0) return;
    i = skipWs(s, choice.end);
    if (s.charCodeAt(i) !== COMMA) break;
    i = skipWs(s, i + 1);
  }
  if (s.charCodeAt(i) === CLOSE_BRACKET) out.end = i + 1;
}

/** Index just past the delta object at `i` (-1: not an object of message fields); counts its generated text (content, refusal, tool arguments). */
function scanDelta(s: string, i: number, out: ChoicesScan): number {
  const delta = new Members(s, i);
  while (delta.next()) {
    const { keyStart: ks, keyEnd: ke, valueStart: v } = delta;
    if (!keyIn(s, ks, ke, DELTA_KEYS)) return -1;
    const end = checkedValue(s, v);
    if (end > 0) {
      if (s.charCodeAt(v) === QUOTE) {
        if (keyIs(s, ks, ke, 'content')) {
          out.contentChars += end - v - 2;
          out.contentAt = v;
          out.contentEnd = end;
        } else if (keyIs(s, ks, ke, 'refusal')) out.contentChars += end - v - 2; // generated too: billed when the provider reports no usage
      } else out.contentChars += markedChars(s, v, end);
    }
    if (!delta.endValue(end)) return -1;
  }
  return delta.end;
}

const scratch: ChoicesScan = { end: -1, contentChars: 0, finished: false, contentAt: -1, contentEnd: -1 };

/** What the walk over a chunk's top-level members found so far. */
interface TopScan {
  choicesAt: number;
  choicesEnd: number;
  contentChars: number;
  finished: boolean;
  created: number | null;
  /** `created` as it stood where the last `choices` began (what a prefix ending there carries). */
  createdAtChoices: number | null;
  contentAt: number;
  contentEnd: number;
}

const top: TopScan = { choicesAt: -1, choicesEnd: -1, contentChars: 0, finished: false, created: null, createdAtChoices: null, contentAt: -1, contentEnd: -1 };

/** Reads `choices` at `v` into `top`; the index just past it, or -1. */
function takeChoices(data: string, v: number): number {
  scratch.contentChars = 0;
  scratch.finished = false;
  scratch.contentAt = -1;
  scratch.contentEnd = -1;
  scanChoices(data, v, scratch);
  top.choicesAt = v;
  top.choicesEnd = scratch.end;
  top.contentChars = scratch.contentChars;
  top.finished = scratch.finished;
  top.contentAt = scratch.contentAt;
  top.contentEnd = scratch.contentEnd;
  top.createdAtChoices = top.created;
  return scratch.end;
}

/** Walks the rest of the top-level members into `top`; false when one is not plain. */
function walkMembers(data: string, members: Members): boolean {
  while (members.next()) {
    const { keyStart: ks, keyEnd: ke, valueStart: v } = members;
    if (!keyIn(data, ks, ke, DROPPED)) return false;
    let end: number;
    if (keyIs(data, ks, ke, 'choices')) end = takeChoices(data, v);
    else {
      end = checkedValue(data, v);
      if (keyIs(data, ks, ke, 'usage') && !(end - v === 4 && data.startsWith('null', v))) return false;
      if (keyIs(data, ks, ke, 'created') && (top.created = plainInteger(data, v, end)) === null) return false;
    }
    if (!members.endValue(end)) return false;
  }
  return members.end >= 0 && skipWs(data, members.end) === data.length && top.choicesAt >= 0;
}

/**
 * The spans of a plain delta chunk, or null. With the prefix of an earlier
 * chunk of the same stream that this one starts with, only the rest is
 * scanned (see ChunkPrefix).
 */
export function scanDeltaChunk(data: string, known: ChunkPrefix | null = null, template: ChunkTemplate | null = null): ChunkSpans | null {
  if (template !== null) {
    const spans = fromTemplate(data, template);
    if (spans !== null) return spans;
  }
  if (known !== null && data.length > known.text.length && beginsWith(data, known.text)) return scanAfter(data, known);
  // Anything that needs the full treatment is sent there (usage, checked below, too).
  if (NOT_PLAIN.test(data)) return null;
  top.choicesAt = -1;
  top.created = null;
  if (!walkMembers(data, new Members(data, skipWs(data, 0)))) return null;
  return spans(data, { text: data.slice(0, top.choicesAt), created: top.createdAtChoices });
}

/** A chunk that starts with a known prefix: its `choices` value begins where the prefix ends (after any blanks). */
function scanAfter(data: string, known: ChunkPrefix): ChunkSpans | null {
  const at = known.text.length;
  NOT_PLAIN_FROM.lastIndex = at;
  if (NOT_PLAIN_FROM.test(data)) return null;
  top.created = known.created;
  const rest = new Members(data, -1);
  // Blanks after the prefix (more than the chunk it came from had) stand before the value, as in a whole scan.
  if (!rest.endValue(takeChoices(data, skipWs(data, at))) || !walkMembers(data, rest)) return null;
  return spans(data, known);
}

function spans(data: string, prefix: ChunkPrefix): ChunkSpans {
  return { choices: data.slice(top.choicesAt, top.choicesEnd), created: top.created, contentChars: top.contentChars, finished: top.finished, prefix, template: templateOf(data, prefix) };
}

function templateOf(data: string, prefix: ChunkPrefix): ChunkTemplate | null {
  const at = top.contentAt;
  const end = top.contentEnd;
  if (at < 0) return null;
  return {
    head: data.slice(0, at + 1),
    tail: data.slice(end - 1),
    choicesAt: top.choicesAt,
    choicesFromEnd: data.length - top.choicesEnd,
    created: top.created,
    finished: top.finished,
    fixedChars: top.contentChars - (end - at - 2),
    prefix,
  };
}

/** The first quote, backslash or control character from `lastIndex` on. */
const STRING_BREAK = /["\\\x00-\x1f]/g;

/** The spans of `data` if it is `t` with other plain text (see ChunkTemplate), else null. */
function fromTemplate(data: string, t: ChunkTemplate): ChunkSpans | null {
  const from = t.head.length;
  const to = data.length - t.tail.length;
  if (!beginsWith(data, t.head) || !finishesWith(data, t.tail)) return null;
  // The text must end exactly where the tail's quote stands (which also refuses a chunk too
  // short to hold head and tail apart: no break is found before `from`). The word NOT_PLAIN
  // refuses is in no tail (the template's chunk passed NOT_PLAIN), so any found is in the text.
  STRING_BREAK.lastIndex = from;
  if (!STRING_BREAK.test(data) || STRING_BREAK.lastIndex !== to + 1) return null;
  if (data.indexOf('reasoning', from) !== -1) return null;
  return {
    choices: data.slice(t.choicesAt, data.length - t.choicesFromEnd),
    created: t.created,
    contentChars: t.fixedChars + (to - from),
    finished: t.finished,
    prefix: t.prefix,
    template: t,
  };
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

/**
 * Length of every "content" and "arguments" string value inside s[from, to): a
 * delta's tool calls (escaped form: close enough for an estimate).
 */
function markedChars(s: string, from: number, to: number): number {
  return stringValueChars(s, from, to, '"content":"') + stringValueChars(s, from, to, '"arguments":"');
}

function stringValueChars(s: string, from: number, to: number, marker: string): number {
  let n = 0;
  for (;;) {
    const k = s.indexOf(marker, from);
    if (k < 0 || k >= to) return n;
    const start = k + marker.length - 1;
    const end = skipString(s, start);
    if (end < 0 || end > to) return n;
    n += end - start - 2;
    from = end;
  }
}
