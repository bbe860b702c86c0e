/**
 * Redis store (deployments), over ioredis.
 *
 * Key layout — every key starts with `<prefix>:`; ids and hashes are inserted
 * with encodeURIComponent, so `:`, `{` and `}` inside an id can neither forge
 * another key nor open a hash tag (ordinary ids such as `key_AbC-12` and hex
 * hashes are unchanged):
 *
 *   <prefix>:key:h:<sha256hex>      string  JSON KeyRecord. The hot path:
 *                                           getKeyByHash is exactly ONE GET.
 *   <prefix>:key:id:<keyId>         string  the key's sha256hex (id → hash)
 *   <prefix>:tenant:{<tenantId>}    string  JSON TenantRecord
 *   <prefix>:tenant:{<tenantId>}:keys list  key ids, creation order (RPUSH)
 *   <prefix>:tenants                set     tenant ids
 *
 * Redis Cluster (options `clusterNodes` instead of `url`: ioredis's Cluster
 * client): no command or script touches more than one key, so nothing
 * depends on two keys sharing a slot. (A key's id and hash cannot share a hash
 * tag: each is looked up knowing only itself, so the only common tag would be
 * a global one, which would put the whole store on one shard.) The tenant
 * record and its key list do share the hash tag `{<tenantId>}`, unused today,
 * so that a later tenant-wide script (e.g. delete a tenant) can be atomic
 * without migrating data. listTenants / listKeys fetch with parallel single-key
 * GETs (no MGET), which ioredis pipelines on the connection.
 *
 * Write ordering — each multi-key write runs as single-key steps, ordered so
 * that the step that makes a record visible comes LAST; an interrupted write
 * therefore leaves only invisible leftovers, which the readers skip:
 *
 *   createTenant: SADD tenants id; then SET tenant NX (conflict if taken; the
 *     SADD is then a no-op since the id was already a member). listTenants
 *     skips members without a record.
 *   createKey: (1) SET key:id NX → claims the id (taken: conflict, nothing was
 *     written); (2) RPUSH the id on the tenant's list; (3) SET key:h NX → the
 *     key goes live (taken: conflict → roll back (2) with LREM and (1) with a
 *     compare-and-delete script, so nothing is left). Claiming the id before
 *     the hash (rather than hash first) means a key can never be live on the
 *     auth path while it is still missing its id entry (which revokeKey needs)
 *     or its list entry. Readers ignore an id entry whose hash record belongs
 *     to another id (an id claim that lost the hash race) or is missing.
 *     If step (3) fails with StoreUnavailableError the outcome is unknown (the
 *     SET may have been applied) so nothing is rolled back.
 *   revokeKey: GET id → hash, GET the record, then a single-key
 *     compare-and-set script (SET only if the JSON is still what was read),
 *     retried on a race. JSON is built in TypeScript, never by Lua's cjson
 *     (which would turn `[]` into `{}`). Idempotent: an already revoked record
 *     is returned unchanged, keeping the first revokedAt.
 *
 * Stored data is validated on read. Bad JSON, a record failing validation,
 * or a record stored under the wrong hash throws `StoreDataError` (a clear
 * error naming the key) rather than reading as absent, because silently
 * treating corruption as "no such key/tenant" hides it from operators and
 * (for tenants) would let a duplicate be created over it.
 *
 * Failures: anything that means Redis could not be used — connection refused
 * or lost, not connected yet (offline queue disabled: fail fast), command
 * timeout, retries exhausted, the client closed, or a server reply such as
 * LOADING / BUSY / READONLY / MASTERDOWN / CLUSTERDOWN / TRYAGAIN / MISCONF /
 * OOM / NOAUTH — rejects with `StoreUnavailableError` (cause attached). Other
 * Redis reply errors (e.g. WRONGTYPE from a foreign value under our prefix)
 * are bugs and are rethrown as they are. On StoreUnavailableError the outcome
 * of a write is unknown.
 *
 * Connection policy: the offline queue is off and unfulfilled commands are
 * not resent after a reconnect (a write the caller was told failed must not
 * be replayed behind its back); each store operation (a script, a pipeline)
 * gives up between commandTimeoutMs and a tenth more (command-deadlines.ts);
 * the client reconnects forever with a backoff of 50 ms doubling to 1 s.
 * Only while the very first connection attempt is in flight do calls wait for
 * it (at most connectTimeoutMs), so a store used right after creation works.
 */
import type { RedisClientOptions } from './redis-client-options.js';
import { type RedisTarget, connectRedis, pingEvery, positive, DEFAULT_COMMAND_TIMEOUT_MS, DEFAULT_CONNECT_TIMEOUT_MS } from './redis-connection.js';
export { toStoreError, DEFAULT_COMMAND_TIMEOUT_MS, DEFAULT_CONNECT_TIMEOUT_MS } from './redis-connection.js';
import {
  type KeyRecord,
  type Store,
  type TenantRecord,
  StoreConflictError,
  StoreUnavailableError,
} from './contract.js';
import {
  StoreDataError,
  checkKeyRecord,
  checkTenantRecord,
  inputKey,
  inputTenant,
  inputTimestamp,
  isSha256Hex,
  oldestFirst,
  revoked,
  tenantOrder,
} from './records.js';

export type RedisStoreOptions = RedisTarget & {
  /** Brand prefix for every key, e.g. "svc": letters, digits, `_`, `-`, `.`. */
  readonly prefix: string;
  /** Connect (TCP + handshake) timeout per attempt. Default 2000 ms. */
  readonly connectTimeoutMs?: number;
  /** Per-command timeout. Default 1000 ms. */
  readonly commandTimeoutMs?: number;
  /** ACL user, password and TLS (redisClientOptions). */
  readonly client?: RedisClientOptions;
};

const REVOKE_ATTEMPTS = 16;

const PREFIX = /^[A-Za-z0-9_.-]{1,64}$/;

/** Delete KEYS[1] only if it still holds ARGV[1]. */
const COMPARE_AND_DELETE = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`;

/** Set KEYS[1] to ARGV[2] only if it still holds ARGV[1]. */
const COMPARE_AND_SET = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0`;

export function createRedisStore(opts: RedisStoreOptions): Store {
  if (!PREFIX.test(opts.prefix)) {
    throw new TypeError('prefix must be 1-64 characters of letters, digits, "_", "-", "."');
  }
  const connectTimeoutMs = positive(opts.connectTimeoutMs, DEFAULT_CONNECT_TIMEOUT_MS, 'connectTimeoutMs');
  const commandTimeoutMs = positive(opts.commandTimeoutMs, DEFAULT_COMMAND_TIMEOUT_MS, 'commandTimeoutMs');
  const p = opts.prefix;
  const enc = encodeURIComponent;
  const keys = {
    keyByHash: (hash: string) => `${p}:key:h:${enc(hash)}`,
    keyById: (id: string) => `${p}:key:id:${enc(id)}`,
    tenant: (id: string) => `${p}:tenant:{${enc(id)}}`,
    tenantKeys: (id: string) => `${p}:tenant:{${enc(id)}}:keys`,
    tenants: `${p}:tenants`,
  };

  const { client, redis, close } = connectRedis(opts, { connectTimeoutMs, commandTimeoutMs, client: opts.client });

  function decode<T>(key: string, raw: string, check: (value: unknown) => T | string): T {
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw);
    } catch (err) {
      throw new StoreDataError(key, 'not valid JSON', err);
    }
    const record = check(parsed);
    if (typeof record === 'string') throw new StoreDataError(key, record);
    return record;
  }

  function decodeKey(key: string, raw: string, hash: string): KeyRecord {
    const record = decode(key, raw, checkKeyRecord);
    if (record.hash !== hash) throw new StoreDataError(key, 'record hash does not match its key');
    return record;
  }

  function decodeTenant(key: string, raw: string, id: string): TenantRecord {
    const record = decode(key, raw, checkTenantRecord);
    if (record.id !== id) throw new StoreDataError(key, 'record id does not match its key');
    return record;
  }

  /** The hash an id entry points to (validated), or null. */
  function decodeHashRef(key: string, raw: string | null): string | null {
    if (raw === null) return null;
    if (!isSha256Hex(raw)) throw new StoreDataError(key, 'not a SHA-256 hex hash');
    return raw;
  }

  /** The record of key `id`, with the raw JSON read, or null if unknown. */
  async function readKeyById(id: string): Promise<{ record: KeyRecord; raw: string; key: string } | null> {
    const idKey = keys.keyById(id);
    const hash = decodeHashRef(idKey, await redis(() => client.get(idKey)));
    if (hash === null) return null;
    const key = keys.keyByHash(hash);
    const raw = await redis(() => client.get(key));
    if (raw === null) return null; // claim of an interrupted or rolled-back create
    const record = decodeKey(key, raw, hash);
    if (record.id !== id) return null; // claim that lost the hash to another key
    return { record, raw, key };
  }


  return {
    kind: 'redis',

    async createTenant(tenant) {
      const record = inputTenant(tenant);
      await redis(() => client.sadd(keys.tenants, record.id));
      const ok = await redis(() => client.set(keys.tenant(record.id), JSON.stringify(record), 'NX'));
      if (ok === null) throw new StoreConflictError(`tenant ${record.id}`);
    },

    async getTenant(id) {
      const key = keys.tenant(id);
      const raw = await redis(() => client.get(key));
      return raw === null ? null : decodeTenant(key, raw, id);
    },

    async listTenants() {
      const ids = await redis(() => client.smembers(keys.tenants));
      const raws = await redis(() => Promise.all(ids.map((id) => client.get(keys.tenant(id)))));
      const records: TenantRecord[] = [];
      ids.forEach((id, i) => {
        const raw = raws[i];
        // A member without a record is an interrupted createTenant: skip it.
        if (raw !== null && raw !== undefined) records.push(decodeTenant(keys.tenant(id), raw, id));
      });
      return tenantOrder(records);
    },

    async createKey(key) {
      const record = inputKey(key);
      const json = JSON.stringify(record);
      const idKey = keys.keyById(record.id);
      const hashKey = keys.keyByHash(record.hash);
      const listKey = keys.tenantKeys(record.tenantId);

      const rollback = async (): Promise<void> => {
        await redis(() => client.lrem(listKey, -1, record.id));
        await redis(() => client.eval(COMPARE_AND_DELETE, 1, idKey, record.hash));
      };

      // (1) claim the id.
      const claimed = await redis(() => client.set(idKey, record.hash, 'NX'));
      if (claimed === null) throw new StoreConflictError(`key id ${record.id}`);
      // (2) list it under its tenant.
      try {
        await redis(() => client.rpush(listKey, record.id));
      } catch (err) {
        await rollback().catch(() => {}); // best effort; leftovers are invisible
        throw err;
      }
      // (3) go live.
      const live = await redis(() => client.set(hashKey, json, 'NX'));
      if (live === null) {
        await rollback().catch(() => {}); // best effort; leftovers are invisible
        throw new StoreConflictError('key hash');
      }
    },

    async getKeyByHash(hash) {
      const key = keys.keyByHash(hash);
      const raw = await redis(() => client.get(key));
      return raw === null ? null : decodeKey(key, raw, hash);
    },

    async getKeyById(id) {
      const found = await readKeyById(id);
      return found === null ? null : found.record;
    },

    async listKeys(tenantId) {
      const ids = await redis(() => client.lrange(keys.tenantKeys(tenantId), 0, -1));
      const unique = [...new Set(ids)];
      const hashes = await redis(() =>
        Promise.all(unique.map((id) => client.get(keys.keyById(id)))),
      );
      const refs = unique.map((id, i) => decodeHashRef(keys.keyById(id), hashes[i] ?? null));
      const raws = await redis(() =>
        Promise.all(refs.map((hash) => (hash === null ? null : client.get(keys.keyByHash(hash))))),
      );
      const records: KeyRecord[] = [];
      unique.forEach((id, i) => {
        const hash = refs[i];
        const raw = raws[i];
        if (hash === null || hash === undefined || raw === null || raw === undefined) return;
        const record = decodeKey(keys.keyByHash(hash), raw, hash);
        if (record.id === id && record.tenantId === tenantId) records.push(record);
      });
      return oldestFirst(records);
    },

    async revokeKey(id, at) {
      inputTimestamp(at, 'revokedAt');
      for (let attempt = 0; attempt < REVOKE_ATTEMPTS; attempt++) {
        const found = await readKeyById(id);
        if (found === null) return null;
        if (found.record.status === 'revoked') return found.record;
        const next = revoked(found.record, at);
        const swapped = await redis(() =>
          client.eval(COMPARE_AND_SET, 1, found.key, found.raw, JSON.stringify(next)),
        );
        if (swapped === 1) return next;
      }
      throw new Error(`revokeKey(${id}): record kept changing, gave up after ${REVOKE_ATTEMPTS} attempts`);
    },

    async ping() {
      await redis(() => pingEvery(client));
    },

    close,
  };
}
