import { expect } from 'vitest';

/** SSE text from events: each a `data:` frame, an object as its JSON, a string (`[DONE]`) as written. */
export const sse = (...events: unknown[]): string => events.map((e) => `data: ${typeof e === 'string' ? e : JSON.stringify(e)}\n\n`).join('');

/** A rewriter's output as events: every frame must be `data: ` and parse ('[DONE]' kept as a string). */
export function events(out: string): unknown[] {
  return out
    .split('\n\n')
    .filter((e) => e.length > 0)
    .map((e) => {
      expect(e.startsWith('data: ')).toBe(true);
      const d = e.slice(6);
      return d === '[DONE]' ? d : JSON.parse(d);
    });
}
