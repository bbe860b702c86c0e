import { hash, randomBytes } from 'node:crypto';

/**
 * API keys: `<brand>_pk_` followed by 43 base64url characters (256 random
 * bits). Only the SHA-256 of the whole key is stored; the key itself is shown
 * once at issuance.
 */
const SECRET_BYTES = 32;

export const keyPrefix = (brand: string): string => `${brand}_pk_`;

export function generateApiKey(brand: string): string {
  return keyPrefix(brand) + randomBytes(SECRET_BYTES).toString('base64url');
}

/** One-shot hash (no Hash object): a third of createHash's cost for a key this short; runs once per request. */
export function hashApiKey(key: string): string {
  return hash('sha256', key, 'hex');
}

export function newKeyId(): string {
  return `key_${randomBytes(12).toString('hex')}`;
}

export function newTenantId(): string {
  return `ten_${randomBytes(12).toString('hex')}`;
}

/** Cheap shape check before any store lookup; a miss is the same 401 as an unknown key. */
export function looksLikeApiKey(value: string, brand: string): boolean {
  const p = keyPrefix(brand);
  return value.length === p.length + 43 && value.startsWith(p) && /^[A-Za-z0-9_-]+$/.test(value.slice(p.length));
}
