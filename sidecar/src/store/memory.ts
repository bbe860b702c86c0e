/**
 * In-process store (the embedded default). Same observable semantics as the
 * Redis store, checked by the shared contract suite:
 *
 * - records are validated on the way in (`TypeError` if invalid) and stored as
 *   private copies; every read returns a fresh copy, so callers can never
 *   mutate stored state (nor can they change it later through the object they
 *   passed in);
 * - createTenant / createKey refuse duplicates with `StoreConflictError`
 *   (a key conflicts on its id or on its hash) and write nothing on conflict;
 * - listKeys is oldest first (createdAt, ties in insertion order); listTenants
 *   is createdAt then id;
 * - revokeKey is idempotent and keeps the first revokedAt;
 * - after close(), every method rejects with `StoreUnavailableError`, like a
 *   Redis store whose connection is gone.
 *
 * Every method is async and runs its whole read-modify-write synchronously,
 * so each operation is atomic with respect to the others.
 */
import {
  type KeyRecord,
  type Store,
  type TenantRecord,
  StoreConflictError,
  StoreUnavailableError,
} from './contract.js';
import {
  copyKey,
  copyTenant,
  inputKey,
  inputTenant,
  inputTimestamp,
  oldestFirst,
  revoked,
  tenantOrder,
} from './records.js';

export function createMemoryStore(): Store {
  const tenants = new Map<string, TenantRecord>();
  const keysByHash = new Map<string, KeyRecord>();
  const hashById = new Map<string, string>();
  /** tenant id → key ids in insertion order. */
  const keyIdsByTenant = new Map<string, string[]>();
  let closed = false;

  function open(): void {
    if (closed) throw new StoreUnavailableError(new Error('memory store is closed'));
  }

  function keyById(id: string): KeyRecord | undefined {
    const hash = hashById.get(id);
    return hash === undefined ? undefined : keysByHash.get(hash);
  }

  return {
    kind: 'memory',

    async createTenant(tenant) {
      open();
      const record = inputTenant(tenant);
      if (tenants.has(record.id)) throw new StoreConflictError(`tenant ${record.id}`);
      tenants.set(record.id, record);
    },

    async getTenant(id) {
      open();
      const record = tenants.get(id);
      return record === undefined ? null : copyTenant(record);
    },

    async listTenants() {
      open();
      return tenantOrder([...tenants.values()].map(copyTenant));
    },

    async createKey(key) {
      open();
      const record = inputKey(key);
      if (hashById.has(record.id)) throw new StoreConflictError(`key id ${record.id}`);
      if (keysByHash.has(record.hash)) throw new StoreConflictError('key hash');
      keysByHash.set(record.hash, record);
      hashById.set(record.id, record.hash);
      const ids = keyIdsByTenant.get(record.tenantId);
      if (ids === undefined) keyIdsByTenant.set(record.tenantId, [record.id]);
      else ids.push(record.id);
    },

    async getKeyByHash(hash) {
      open();
      const record = keysByHash.get(hash);
      return record === undefined ? null : copyKey(record);
    },

    async getKeyById(id) {
      open();
      const record = keyById(id);
      return record === undefined ? null : copyKey(record);
    },

    async listKeys(tenantId) {
      open();
      const records: KeyRecord[] = [];
      for (const id of keyIdsByTenant.get(tenantId) ?? []) {
        const record = keyById(id);
        if (record !== undefined) records.push(copyKey(record));
      }
      return oldestFirst(records);
    },

    async revokeKey(id, at) {
      open();
      inputTimestamp(at, 'revokedAt');
      const record = keyById(id);
      if (record === undefined) return null;
      const next = revoked(record, at);
      keysByHash.set(next.hash, next);
      return copyKey(next);
    },

    async ping() {
      open();
    },

    async close() {
      closed = true;
    },
  };
}
