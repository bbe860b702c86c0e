/**
 * The gateway's own token count when the provider reports none: about four
 * characters a token over every string in the value (message contents, tool
 * arguments, input strings), at least one token.
 */
export function estimateTokens(value: unknown): number {
  return Math.max(1, Math.ceil(countChars(value, 0) / 4));
}

function countChars(v: unknown, depth: number): number {
  if (typeof v === 'string') return v.length;
  if (depth > 8 || v === null || typeof v !== 'object') return 0;
  let n = 0;
  for (const x of Array.isArray(v) ? v : Object.values(v)) n += countChars(x, depth + 1);
  return n;
}
