/**
 * Record validation, copying and ordering shared by the store implementations,
 * so the memory and Redis stores accept, return and order exactly the same data.
 *
 * - `checkTenantRecord` / `checkKeyRecord` build a *fresh* object holding only
 *   the contract's fields (unknown fields are dropped, arrays are copied), or
 *   return a reason string when the value is not a valid record. The stores use
 *   them both on input (invalid → `TypeError`) and when decoding stored data
 *   (invalid → `StoreDataError`).
 * - Returned records are plain, mutable copies: a caller mutating one never
 *   changes what the store holds.
 */
import type { KeyRecord, TenantRecord } from './contract.js';

/**
 * Stored data that cannot be decoded (bad JSON, missing fields, a record
 * stored under the wrong id or hash). Deliberately NOT treated as "absent":
 * silently returning null would hide corruption (or a foreign writer sharing
 * the prefix) and, for tenants, could let a duplicate be created over it.
 * It is also not a `StoreUnavailableError`: the service answered, the data is
 * wrong, and an operator must look. Callers on the auth path fail closed on
 * any error, so this denies the request too.
 */
export class StoreDataError extends Error {
  readonly key: string;
  constructor(key: string, reason: string, cause?: unknown) {
    super(`corrupt store data at ${key}: ${reason}`, { cause });
    this.name = 'StoreDataError';
    this.key = key;
  }
}

const SHA256_HEX = /^[0-9a-f]{64}$/;

export function isSha256Hex(value: string): boolean {
  return SHA256_HEX.test(value);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isNonEmptyString(value: unknown): value is string {
  return typeof value === 'string' && value.length > 0;
}

function isTimestamp(value: unknown): value is string {
  return typeof value === 'string' && value.length > 0 && !Number.isNaN(Date.parse(value));
}

function stringArray(value: unknown): string[] | null {
  if (!Array.isArray(value)) return null;
  const out: string[] = [];
  for (const item of value) {
    if (typeof item !== 'string') return null;
    out.push(item);
  }
  return out;
}

/** A fresh TenantRecord with exactly the contract's fields, or why not. */
export function checkTenantRecord(value: unknown): TenantRecord | string {
  if (!isObject(value)) return 'not an object';
  const { id, name, createdAt } = value;
  if (!isNonEmptyString(id)) return 'id must be a non-empty string';
  if (typeof name !== 'string') return 'name must be a string';
  if (!isTimestamp(createdAt)) return 'createdAt must be an ISO-8601 timestamp';
  return { id, name, createdAt };
}

/** A fresh KeyRecord with exactly the contract's fields, or why not. */
export function checkKeyRecord(value: unknown): KeyRecord | string {
  if (!isObject(value)) return 'not an object';
  const { id, tenantId, hash, last4, name, status, createdAt, revokedAt } = value;
  if (!isNonEmptyString(id)) return 'id must be a non-empty string';
  if (!isNonEmptyString(tenantId)) return 'tenantId must be a non-empty string';
  if (typeof hash !== 'string' || !isSha256Hex(hash)) {
    return 'hash must be 64 lowercase hex characters (SHA-256)';
  }
  if (typeof last4 !== 'string') return 'last4 must be a string';
  if (typeof name !== 'string') return 'name must be a string';
  const scopes = stringArray(value.scopes);
  if (scopes === null) return 'scopes must be an array of strings';
  let allowedIps: string[] | null = null;
  if (value.allowedIps !== null) {
    allowedIps = stringArray(value.allowedIps);
    if (allowedIps === null) return 'allowedIps must be null or an array of strings';
  }
  if (status !== 'active' && status !== 'revoked') return 'status must be "active" or "revoked"';
  if (!isTimestamp(createdAt)) return 'createdAt must be an ISO-8601 timestamp';
  if (status === 'active' && revokedAt !== null) return 'an active key must have revokedAt null';
  if (status === 'revoked' && !isTimestamp(revokedAt)) {
    return 'a revoked key must have an ISO-8601 revokedAt';
  }
  return {
    id,
    tenantId,
    hash,
    last4,
    name,
    scopes,
    allowedIps,
    status,
    createdAt,
    revokedAt: status === 'revoked' ? (revokedAt as string) : null,
  };
}

/** Validates a record handed to a create method; throws TypeError if invalid. */
export function inputTenant(value: TenantRecord): TenantRecord {
  const checked = checkTenantRecord(value);
  if (typeof checked === 'string') throw new TypeError(`invalid tenant record: ${checked}`);
  return checked;
}

/** Validates a record handed to a create method; throws TypeError if invalid. */
export function inputKey(value: KeyRecord): KeyRecord {
  const checked = checkKeyRecord(value);
  if (typeof checked === 'string') throw new TypeError(`invalid key record: ${checked}`);
  return checked;
}

/** Validates the `at` of revokeKey; throws TypeError if invalid. */
export function inputTimestamp(at: string, what: string): string {
  if (!isTimestamp(at)) throw new TypeError(`${what} must be an ISO-8601 timestamp`);
  return at;
}

/** The record with status revoked; keeps the first revokedAt (idempotent). */
export function revoked(key: KeyRecord, at: string): KeyRecord {
  if (key.status === 'revoked') return copyKey(key);
  return { ...copyKey(key), status: 'revoked', revokedAt: at };
}

export function copyTenant(t: TenantRecord): TenantRecord {
  return { id: t.id, name: t.name, createdAt: t.createdAt };
}

export function copyKey(k: KeyRecord): KeyRecord {
  return {
    id: k.id,
    tenantId: k.tenantId,
    hash: k.hash,
    last4: k.last4,
    name: k.name,
    scopes: [...k.scopes],
    allowedIps: k.allowedIps === null ? null : [...k.allowedIps],
    status: k.status,
    createdAt: k.createdAt,
    revokedAt: k.revokedAt,
  };
}

/**
 * Oldest first: ascending createdAt (as instants, so `…00Z` and `…00.000Z`
 * compare equal); ties keep the given order, which both stores make insertion
 * order. Returns a new array.
 */
export function oldestFirst<T extends { readonly createdAt: string }>(records: readonly T[]): T[] {
  return records
    .map((record, index) => ({ record, index, at: Date.parse(record.createdAt) }))
    .sort((a, b) => a.at - b.at || a.index - b.index)
    .map((entry) => entry.record);
}

/** Tenants have no natural order in a set: createdAt ascending, then id. */
export function tenantOrder(records: readonly TenantRecord[]): TenantRecord[] {
  return records
    .map((record) => ({ record, at: Date.parse(record.createdAt) }))
    .sort((a, b) => a.at - b.at || (a.record.id < b.record.id ? -1 : a.record.id > b.record.id ? 1 : 0))
    .map((entry) => entry.record);
}
