export type JsonObject = Record<string, unknown>;

export const isObject = (v: unknown): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);

/** JSON.parse that returns undefined instead of throwing. */
export function tryParseJson(text: string | Buffer): unknown {
  try {
    return JSON.parse(typeof text === 'string' ? text : text.toString('utf8'));
  } catch {
    return undefined;
  }
}

export const isNonNegativeInt = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

export const isPositiveInt = (v: unknown): v is number => isNonNegativeInt(v) && v >= 1;
