/**
 * Checks on a request body that must run before (or instead of) anything
 * recursive: how deep it nests, read from the bytes without parsing, and keys
 * that poison an object's prototype in the provider's JSON parser.
 */

/** Deepest nesting of objects and arrays a request body may have. */
export const MAX_JSON_DEPTH = 64;

const OPEN_OBJECT = 0x7b; // {
const OPEN_ARRAY = 0x5b; // [
const CLOSE_OBJECT = 0x7d; // }
const CLOSE_ARRAY = 0x5d; // ]
const QUOTE = 0x22; // "
const BACKSLASH = 0x5c; // \

/** True when the JSON text nests objects/arrays deeper than `max` (one pass, no recursion, strings skipped). */
export function nestsDeeperThan(bytes: Buffer, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i];
    if (inString) {
      if (b === BACKSLASH) i++;
      else if (b === QUOTE) inString = false;
    } else if (b === QUOTE) inString = true;
    else if (b === OPEN_OBJECT || b === OPEN_ARRAY) {
      if (++depth > max) return true;
    } else if (b === CLOSE_OBJECT || b === CLOSE_ARRAY) depth--;
  }
  return false;
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
