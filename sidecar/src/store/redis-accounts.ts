/**
 * The account records on Redis (deployments).
 *
 *   <p>:ws:{w}:members       hash    person id → JSON Member, or "removed" (a tombstone)
 *   <p>:ws:{w}:card          string  JSON SavedCard (a provider token, brand, last 4; never a number)
 *   <p>:ws:{w}:autotopup     string  JSON AutoTopup
 *   <p>:ws:{w}:idem:<key>    string  JSON IdempotencyRecord (24 h)
 *   <p>:keyperson:<keyId>    string  the person a key was issued by
 *   <p>:tiers                string  JSON CreditTier[] (unset: the configured tiers)
 *   <p>:ws:{w}:rl:<c>:<min>  string  events of counter c in that minute (expires after 2 min)
 *
 * Role changes and removals run as one script over the members hash, so
 * "a workspace always keeps an owner" holds under concurrent changes.
 */
import { type RedisTarget, connectRedis, DEFAULT_COMMAND_TIMEOUT_MS, DEFAULT_CONNECT_TIMEOUT_MS } from './redis-connection.js';
import type { RedisClientOptions } from './redis-client-options.js';
import type { AccountStore, AutoTopup, CreditTier, IdempotencyRecord, Member, MemberChange, SavedCard } from './account-contract.js';

const enc = encodeURIComponent;
const IDEMPOTENCY_TTL_SECONDS = 24 * 3600;

/** ARGV: person, new role ('' removes). Counts owners other than the person. */
const CHANGE_MEMBER = `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur or cur == 'removed' then return 'not_found' end
if ARGV[2] ~= 'owner' then
  local owners = 0
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    if all[i] ~= ARGV[1] and all[i + 1] ~= 'removed' and cjson.decode(all[i + 1]).role == 'owner' then owners = owners + 1 end
  end
  if owners == 0 then return 'last_owner' end
end
if ARGV[2] == '' then redis.call('HSET', KEYS[1], ARGV[1], 'removed') else redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) end
return 'ok'`;

const ADD_MEMBER = `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and cur ~= 'removed' then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1`;

export function createRedisAccountStore(opts: RedisTarget & { prefix: string; client?: RedisClientOptions }): AccountStore {
  const { client, redis, close } = connectRedis(opts, { connectTimeoutMs: DEFAULT_CONNECT_TIMEOUT_MS, commandTimeoutMs: DEFAULT_COMMAND_TIMEOUT_MS, client: opts.client });
  const p = opts.prefix;
  const k = {
    members: (w: string) => `${p}:ws:{${enc(w)}}:members`,
    card: (w: string) => `${p}:ws:{${enc(w)}}:card`,
    auto: (w: string) => `${p}:ws:{${enc(w)}}:autotopup`,
    idem: (w: string, key: string) => `${p}:ws:{${enc(w)}}:idem:${enc(key)}`,
    keyPerson: (id: string) => `${p}:keyperson:${enc(id)}`,
    tiers: `${p}:tiers`,
    window: (w: string, c: string, minute: number) => `${p}:ws:{${enc(w)}}:rl:${enc(c)}:${minute}`,
  };
  const json = <T>(v: string | null): T | null => (v === null ? null : (JSON.parse(v) as T));
  const setOrDel = (key: string, v: unknown): Promise<unknown> => redis<unknown>(() => (v === null ? client.del(key) : client.set(key, JSON.stringify(v))));
  const memberJson = (m: Member) => JSON.stringify({ personId: m.personId, role: m.role, addedAt: m.addedAt });
  return {
    async getMember(w, person) {
      const v = await redis(() => client.hget(k.members(w), person));
      return v === null ? null : v === 'removed' ? 'removed' : json<Member>(v);
    },
    async listMembers(w) {
      const all = await redis(() => client.hgetall(k.members(w)));
      return Object.values(all)
        .filter((v) => v !== 'removed')
        .map((v) => JSON.parse(v) as Member)
        .sort((a, b) => a.addedAt.localeCompare(b.addedAt) || a.personId.localeCompare(b.personId));
    },
    async addMember(w, m) {
      return (await redis(() => client.eval(ADD_MEMBER, 1, k.members(w), m.personId, memberJson(m)))) === 1;
    },
    async putMember(w, m) {
      await redis(() => client.hset(k.members(w), m.personId, memberJson(m)));
    },
    async setRole(w, person, role) {
      const cur = await this.getMember(w, person);
      if (cur === null || cur === 'removed') return 'not_found';
      return (await redis(() => client.eval(CHANGE_MEMBER, 1, k.members(w), person, role, memberJson({ ...cur, role })))) as MemberChange;
    },
    async removeMember(w, person) {
      return (await redis(() => client.eval(CHANGE_MEMBER, 1, k.members(w), person, '', ''))) as MemberChange;
    },
    async setKeyPerson(keyId, person) {
      await redis(() => client.set(k.keyPerson(keyId), person));
    },
    async getKeyPerson(keyId) {
      return redis(() => client.get(k.keyPerson(keyId)));
    },
    async getCard(w) {
      return json<SavedCard>(await redis(() => client.get(k.card(w))));
    },
    async setCard(w, c) {
      await setOrDel(k.card(w), c);
    },
    async getAutoTopup(w) {
      return json<AutoTopup>(await redis(() => client.get(k.auto(w))));
    },
    async setAutoTopup(w, a) {
      await setOrDel(k.auto(w), a);
    },
    async getTiers() {
      return json<CreditTier[]>(await redis(() => client.get(k.tiers)));
    },
    async setTiers(t) {
      await setOrDel(k.tiers, t);
    },
    async claimIdempotency(w, key, rec) {
      const set = await redis(() => client.set(k.idem(w, key), JSON.stringify(rec), 'EX', IDEMPOTENCY_TTL_SECONDS, 'NX'));
      if (set === 'OK') return null;
      return json<IdempotencyRecord>(await redis(() => client.get(k.idem(w, key))));
    },
    async finishIdempotency(w, key, rec) {
      await redis(() => client.set(k.idem(w, key), JSON.stringify(rec), 'EX', IDEMPOTENCY_TTL_SECONDS));
    },
    async dropIdempotency(w, key) {
      await redis(() => client.del(k.idem(w, key)));
    },
    async countInWindow(w, counter, minute) {
      const key = k.window(w, counter, minute);
      const [[, n]] = (await redis(() => client.multi().incr(key).expire(key, 120).exec())) as [[unknown, number]];
      return n;
    },
    close,
  };
}
