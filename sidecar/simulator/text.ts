/**
 * Deterministic generated text. One word is one token; the i-th streamed
 * piece is the i-th word with a leading space (except the first), so the
 * concatenated stream equals the non-streamed text exactly.
 */

const CONTENT_WORDS = (
  'The simulated model answers with steady deterministic words so every test ' +
  'and benchmark can predict the exact text token counts and finish reasons ' +
  'it will see from this upstream without calling a real provider.'
).split(' ');

const REASONING_WORDS = (
  'Let me think about this request step by step first checking what the user ' +
  'asked then weighing the options before writing a short and careful answer.'
).split(' ');

/** Rough prompt-size estimate: about four characters per token, at least 1. */
export function estimateTokens(chars: number): number {
  return chars <= 4 ? 1 : Math.ceil(chars / 4);
}

class WordSource {
  private readonly first: string[];
  private readonly next: string[];
  private readonly firstDelta: string[];
  private readonly nextDelta: string[];
  private readonly texts = new Map<number, { text: string; json: string }>();

  constructor(words: readonly string[], field: string) {
    this.first = [...words];
    this.next = words.map((w) => ' ' + w);
    this.firstDelta = this.first.map((w) => `{${JSON.stringify(field)}:${JSON.stringify(w)}}`);
    this.nextDelta = this.next.map((w) => `{${JSON.stringify(field)}:${JSON.stringify(w)}}`);
  }

  /** The i-th piece of text (word with a leading space unless i is 0). */
  piece(i: number): string {
    const k = i % this.first.length;
    return (i === 0 ? this.first[k] : this.next[k]) ?? '';
  }

  /** Pre-serialized delta object carrying piece(i), e.g. `{"content":" word"}`. */
  delta(i: number): string {
    const k = i % this.first.length;
    return (i === 0 ? this.firstDelta[k] : this.nextDelta[k]) ?? '{}';
  }

  /** The whole text of n pieces. */
  text(n: number): string {
    return this.cached(n).text;
  }

  /** The whole text of n pieces as a JSON string literal. */
  json(n: number): string {
    return this.cached(n).json;
  }

  private cached(n: number): { text: string; json: string } {
    let t = this.texts.get(n);
    if (t === undefined) {
      let text = '';
      for (let i = 0; i < n; i++) text += this.piece(i);
      t = { text, json: JSON.stringify(text) };
      if (this.texts.size >= 256) this.texts.clear();
      this.texts.set(n, t);
    }
    return t;
  }
}

export const content = new WordSource(CONTENT_WORDS, 'content');
export const reasoning = new WordSource(REASONING_WORDS, 'reasoning_content');
