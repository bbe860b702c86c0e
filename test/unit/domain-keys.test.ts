/** API key generation, hashing and shape check. */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { generateApiKey, hashApiKey, keyPrefix, looksLikeApiKey, newKeyId, newTenantId } from '../../sidecar/src/domain/auth/keys.js';

describe('keys', () => {
  it('generated keys have the documented shape and are unique', () => {
    const keys = Array.from({ length: 500 }, () => generateApiKey('svc'));
    for (const k of keys) expect(k).toMatch(/^svc_pk_[A-Za-z0-9_-]{43}$/);
    expect(new Set(keys).size).toBe(keys.length);
  });

  it('the prefix follows the brand', () => {
    expect(keyPrefix('acme')).toBe('acme_pk_');
    expect(generateApiKey('acme')).toMatch(/^acme_pk_[A-Za-z0-9_-]{43}$/);
  });

  it('the hash is the sha256 hex of the whole key', () => {
    const k = generateApiKey('svc');
    expect(hashApiKey(k)).toBe(createHash('sha256').update(k).digest('hex'));
    expect(hashApiKey(k)).toMatch(/^[0-9a-f]{64}$/);
    expect(hashApiKey('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    expect(hashApiKey(k)).not.toBe(hashApiKey(k.slice(7))); // not only the secret part
  });

  it('looksLikeApiKey accepts generated keys and rejects near misses', () => {
    const k = generateApiKey('svc');
    expect(looksLikeApiKey(k, 'svc')).toBe(true);
    expect(looksLikeApiKey(k, 'acme')).toBe(false);
    expect(looksLikeApiKey(k.slice(0, -1), 'svc')).toBe(false);
    expect(looksLikeApiKey(k + 'A', 'svc')).toBe(false);
    expect(looksLikeApiKey(`${k.slice(0, -1)}=`, 'svc')).toBe(false);
    expect(looksLikeApiKey(`svc_sk_${k.slice(7)}`, 'svc')).toBe(false);
  });

  it('ids are opaque and unique', () => {
    expect(newKeyId()).toMatch(/^key_[0-9a-f]{24}$/);
    expect(newTenantId()).toMatch(/^ten_[0-9a-f]{24}$/);
    expect(newKeyId()).not.toBe(newKeyId());
  });
});
