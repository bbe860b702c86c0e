/**
 * The store contract: everything the gateway keeps outside its own process.
 * Two implementations honour it (memory for the embedded default, Redis for
 * deployments); one contract test suite runs against both.
 *
 * Rules every implementation follows:
 * - Records go in and come out as plain data; callers never see Redis types.
 * - A key is found only by the SHA-256 hex of the whole key, never by prefix.
 * - Writes that create a record refuse duplicates (`StoreConflictError`).
 * - Any failure to reach the backing service surfaces as `StoreUnavailableError`
 *   so the money and auth paths can fail closed.
 */

export type KeyStatus = 'active' | 'revoked';

export interface TenantRecord {
  readonly id: string;
  readonly name: string;
  readonly createdAt: string; // ISO-8601 UTC
}

export interface KeyRecord {
  /** Opaque key id (`key_…`), safe to show and log. */
  readonly id: string;
  readonly tenantId: string;
  /** SHA-256 hex of the whole key; the only lookup path. */
  readonly hash: string;
  /** Last four characters of the key, for display only. */
  readonly last4: string;
  readonly name: string;
  readonly scopes: readonly string[];
  /** null: no allowlist. Otherwise addresses or CIDR ranges (v4 and v6). */
  readonly allowedIps: readonly string[] | null;
  readonly status: KeyStatus;
  readonly createdAt: string;
  readonly revokedAt: string | null;
}

export class StoreUnavailableError extends Error {
  constructor(cause?: unknown) {
    super('store unavailable', { cause });
    this.name = 'StoreUnavailableError';
  }
}

/**
 * Written on the master, but fewer replicas than required acknowledged it in time
 * (`store.replicaAcks`): unavailable as far as the caller is concerned (the journal
 * keeps the operation and runs it again, idempotently), though the write itself landed.
 */
export class NotReplicatedError extends StoreUnavailableError {
  constructor(cause?: unknown) {
    super(cause);
    this.name = 'NotReplicatedError';
  }
}

export class StoreConflictError extends Error {
  constructor(what: string) {
    super(`${what} already exists`);
    this.name = 'StoreConflictError';
  }
}

export interface Store {
  readonly kind: 'memory' | 'redis';

  createTenant(tenant: TenantRecord): Promise<void>;
  getTenant(id: string): Promise<TenantRecord | null>;
  listTenants(): Promise<TenantRecord[]>;

  /** Inserts a new key record; conflict if its id or hash is taken. */
  createKey(key: KeyRecord): Promise<void>;
  getKeyByHash(hash: string): Promise<KeyRecord | null>;
  getKeyById(id: string): Promise<KeyRecord | null>;
  /** Keys of one tenant, oldest first. */
  listKeys(tenantId: string): Promise<KeyRecord[]>;
  /** Marks a key revoked (idempotent; keeps the first revokedAt). null if unknown. */
  revokeKey(id: string, at: string): Promise<KeyRecord | null>;

  /** Resolves when the backing service answers; rejects with StoreUnavailableError. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
