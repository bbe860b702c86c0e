/**
 * The money ledger on Redis or a Redis Cluster. Every operation is one Lua
 * script over one tenant's keys, which share the hash tag `{<tenantId>}`, so
 * each is atomic and stays within one Cluster slot (RENEW and REAP build hold
 * keys from an ARGV prefix carrying that same tag). Scripts check everything
 * before their first write (Redis has no rollback).
 *
 *   <p>:acct:{t}               hash    balance, held (every open hold, leases included), leased (the open
 *                                      leases' part of held), cap, spent:<period>, lease_gen (raised by a
 *                                      cap change: leases of an older generation are stale), lease_block
 *                                      (no lease is granted before this instant: a deduct met leased credit)
 *   <p>:hold:{t}:<rid>         hash    amount, state (held|settled|released), expires (end of the lease),
 *                                      deadline (the most a renewal can reach), owner (instance), period,
 *                                      key_id, charged, claimed (the response processing took it over)
 *                                      (a credit lease is a hold named by its lease id; its amount shrinks
 *                                      as pieces of it move into request holds)
 *   <p>:holds:{t}              zset    open holds by lease end (member: request id or lease id)
 *   <p>:ledger:{t}             stream  money movements: grant, deduct, charge (signed amount, balance_after)
 *   <p>:usage:{t}              stream  one usage record per settled request (no content field exists)
 *   <p>:usage:{t}:day:<day>    hash    <alias>|prompt, |completion, |requests, |cost
 *   <p>:rl:{t}:<scope>:<min>:r string  requests in that minute (expires after 2 min)
 *   <p>:rl:{t}:<scope>:<min>:t string  tokens in that minute
 *   <p>:idem:{t}:<key>         string  the ledger entry an idempotency key produced (30 days)
 *   <p>:holding                zset    tenants that may have open holds, scored by the latest
 *                                      deadline written for them (the reaper's index; no SCAN)
 *
 * Retention: the two streams are trimmed as they are written (XADD MINID ~,
 * the cutoff from the server's clock via TIME) and expire when nothing is
 * written to them for the retention period; day totals expire after 400 days.
 *
 * Idempotency: reserve answers "replay" when the hold exists; settle and
 * release look at the hold's state, so a command resent after a reconnect is
 * applied once. Settled holds are kept 7 days for that purpose.
 */
import { checkRetention, DEFAULT_RETENTION, FINISHED_HOLD_MS, type StreamRetention } from './retention.js';
import {
  InsufficientBalanceError,
  LEASE_BLOCK_MS,
  type AccountState,
  type Ledger,
  type LeaseInput,
  type LeaseOutcome,
  type LedgerEntry,
  type MoveInput,
  type MoveOutcome,
  type ReserveInput,
  type ReserveOutcome,
  type SettleInput,
  type SettleOutcome,
  type UsageDay,
  type UsageRecord,
} from './ledger-contract.js';
import { ReplyError } from 'ioredis';
import type { RedisClientOptions } from './redis-client-options.js';
import { NotReplicatedError, StoreUnavailableError } from './contract.js';
import { type RedisClient, type RedisTarget, connectRedis, corked, pingEvery, refreshRouting, toStoreError, DEFAULT_COMMAND_TIMEOUT_MS, DEFAULT_CONNECT_TIMEOUT_MS } from './redis-connection.js';
import { checkAdjust, checkLease, checkListing, checkMove, checkRenew, checkReserve, checkSettle, daysBetween, instant, nonEmpty, nonNegativeInteger } from './ledger-input.js';

const RESERVE = `
if redis.call('EXISTS', KEYS[2]) == 1 then return 2 end
local amount = tonumber(ARGV[1])
local tokens = tonumber(ARGV[2])
local rpm = tonumber(ARGV[5])
local tpm = tonumber(ARGV[6])
if rpm >= 0 and tonumber(redis.call('GET', KEYS[4]) or '0') + 1 > rpm then return -3 end
if tpm >= 0 and tonumber(redis.call('GET', KEYS[5]) or '0') + tokens > tpm then return -3 end
local a = redis.call('HMGET', KEYS[1], 'balance', 'held', 'cap', 'spent:' .. ARGV[4])
local balance = tonumber(a[1] or '0')
local held = tonumber(a[2] or '0')
if a[3] and tonumber(a[4] or '0') + held + amount > tonumber(a[3]) then return -2 end
if ARGV[3] == '1' and balance - held < amount then return -1 end
local ttl = tonumber(ARGV[8]) * 1000
local deadline = tonumber(ARGV[7]) + ttl
local expires = tonumber(ARGV[7]) + math.floor(tonumber(ARGV[11]) * 1000)
if expires > deadline then expires = deadline end
redis.call('HINCRBY', KEYS[1], 'held', amount)
redis.call('HSET', KEYS[2], 'amount', amount, 'state', 'held', 'expires', expires, 'deadline', deadline, 'period', ARGV[4],
  'key_id', ARGV[9], 'owner', ARGV[12])
redis.call('PEXPIRE', KEYS[2], ttl + ${FINISHED_HOLD_MS})
redis.call('ZADD', KEYS[3], expires, ARGV[10])
if rpm >= 0 then redis.call('INCR', KEYS[4]) redis.call('EXPIRE', KEYS[4], 120) end
if tpm >= 0 then redis.call('INCRBY', KEYS[5], tokens) redis.call('EXPIRE', KEYS[5], 120) end
return 1`;

/** Gives back an open hold's amount: held, and leased too when the hold is a credit lease. */
const GIVE_BACK = `
local function giveBack(acct, amount, lease)
  redis.call('HINCRBY', acct, 'held', 0 - amount)
  if lease then redis.call('HINCRBY', acct, 'leased', 0 - amount) end
end
`;

/**
 * Opens or grows a credit lease (KEYS: acct, lease hold, holds). ARGV: want, minimum,
 * headroom, credit check, period, now, ttl (s), lease (ms), owner, lease id (encoded).
 * Returns {granted, total, gone}.
 */
const LEASE = GIVE_BACK + `
local now = tonumber(ARGV[6])
local h = redis.call('HMGET', KEYS[2], 'state', 'amount', 'deadline', 'gen')
local total = tonumber(h[2] or '0')
local a = redis.call('HMGET', KEYS[1], 'balance', 'held', 'cap', 'spent:' .. ARGV[5], 'lease_gen')
local gen = a[5] or '0'
-- Stale (the cap changed since it was granted): it grows no more. Requests admitted inside
-- it may still hold part of it, so its holder gives it back, not this.
if h[1] == 'held' and (h[4] or '0') ~= gen then return {0, total, 1} end
if h[1] and (h[1] ~= 'held' or tonumber(h[3]) <= now) then
  if h[1] ~= 'held' then total = 0 end
  return {0, total, 1}
end
if tonumber(redis.call('HGET', KEYS[1], 'lease_block') or '0') > now then return {0, total, 0} end
local headroom = tonumber(ARGV[3])
local held = tonumber(a[2] or '0')
local grant = tonumber(ARGV[1])
if ARGV[4] == '1' then
  local room = math.floor((tonumber(a[1] or '0') - held) / headroom)
  if room < grant then grant = room end
end
if a[3] then
  local room = math.floor((tonumber(a[3]) - tonumber(a[4] or '0') - held) / headroom)
  if room < grant then grant = room end
end
if grant < tonumber(ARGV[2]) then return {0, total, 0} end
local ttl = tonumber(ARGV[7]) * 1000
local deadline = now + ttl
if h[1] then deadline = tonumber(h[3]) end
local expires = now + tonumber(ARGV[8])
if expires > deadline then expires = deadline end
redis.call('HINCRBY', KEYS[1], 'held', grant)
redis.call('HINCRBY', KEYS[1], 'leased', grant)
if h[1] then
  redis.call('HSET', KEYS[2], 'amount', total + grant, 'expires', expires)
else
  redis.call('HSET', KEYS[2], 'amount', grant, 'state', 'held', 'expires', expires, 'deadline', deadline, 'period', ARGV[5],
    'key_id', '', 'owner', ARGV[9], 'lease', '1', 'gen', gen)
  redis.call('PEXPIRE', KEYS[2], ttl + ${FINISHED_HOLD_MS})
end
redis.call('ZADD', KEYS[3], expires, ARGV[10])
return {grant, total + grant, 0}`;

/**
 * A request's hold out of an open lease (KEYS: lease hold, request hold, holds, acct).
 * ARGV: amount, now, ttl (s), lease (ms), period, key id, owner, request id (encoded), lease id (encoded),
 * admitted before (1/0: a stale lease still gives), claimed (1/0).
 * Returns 1 moved, 2 the request id has a hold or tombstone, 0 no open lease that large,
 * 3 an admission met a stale lease (of an older generation; nothing changed).
 */
const MOVE = `
if redis.call('EXISTS', KEYS[2]) == 1 then return 2 end
local amount = tonumber(ARGV[1])
local h = redis.call('HMGET', KEYS[1], 'state', 'amount', 'gen')
if h[1] ~= 'held' then return 0 end
if ARGV[10] ~= '1' and (h[3] or '0') ~= (redis.call('HGET', KEYS[4], 'lease_gen') or '0') then return 3 end
if tonumber(h[2]) < amount then return 0 end
redis.call('HINCRBY', KEYS[1], 'amount', 0 - amount)
redis.call('HINCRBY', KEYS[4], 'leased', 0 - amount)
local now = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3]) * 1000
local deadline = now + ttl
local expires = now + tonumber(ARGV[4])
if expires > deadline then expires = deadline end
redis.call('HSET', KEYS[2], 'amount', amount, 'state', 'held', 'expires', expires, 'deadline', deadline, 'period', ARGV[5],
  'key_id', ARGV[6], 'owner', ARGV[7])
if ARGV[11] == '1' then redis.call('HSET', KEYS[2], 'claimed', 1) end
redis.call('PEXPIRE', KEYS[2], ttl + ${FINISHED_HOLD_MS})
redis.call('ZADD', KEYS[3], expires, ARGV[8])
return 1`;

/** Lua: the oldest stream id to keep, given a retention in ms (the server's clock). */
const CUTOFF = `
local function cutoff(retentionMs)
  local t = redis.call('TIME')
  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(retentionMs)
  if ms < 0 then ms = 0 end
  return string.format('%.0f', ms)
end
`;

/**
 * KEYS: acct, request hold, holds, ledger, usage, day, lease hold (the request hold again when
 * there is no commitment). ARGV[18]: the commitment's amount inside that lease ('' none).
 * Returns {applied, charged, uncovered, lease stale (1), fresh (0) or no commitment (-1)}.
 */
const SETTLE_BODY = `
local h = redis.call('HMGET', KEYS[2], 'state', 'amount', 'charged')
if h[1] == 'settled' then return {0, tonumber(h[3] or '0'), 0, -1} end
local stale = -1
if not h[1] and ARGV[18] ~= '' then
  -- Admitted inside the lease and never moved out: the commitment leaves the lease now.
  stale = 1
  local c = tonumber(ARGV[18])
  local l = redis.call('HMGET', KEYS[7], 'state', 'amount', 'gen', 'lease')
  if l[1] == 'held' and l[4] and tonumber(l[2]) >= c then
    redis.call('HINCRBY', KEYS[7], 'amount', 0 - c)
    redis.call('HINCRBY', KEYS[1], 'leased', 0 - c)
    h = {'held', c}
    if (l[3] or '0') == (redis.call('HGET', KEYS[1], 'lease_gen') or '0') then stale = 0 end
  end
end
local charge = tonumber(ARGV[2])
local charged = charge
local uncovered = 0
local a = redis.call('HMGET', KEYS[1], 'balance', 'held')
local balance = tonumber(a[1] or '0')
local held = tonumber(a[2] or '0')
local holdAmt = tonumber(h[2] or '0')
if h[1] == 'held' then
  if charge > holdAmt then charged = holdAmt uncovered = charge - holdAmt end
  redis.call('HINCRBY', KEYS[1], 'held', 0 - holdAmt)
elseif ARGV[3] == '1' then
  local avail = balance - held
  if avail < 0 then avail = 0 end
  if charge > avail then charged = avail uncovered = charge - avail end
end
if charged ~= 0 then
  local after = redis.call('HINCRBY', KEYS[1], 'balance', 0 - charged)
  redis.call('HINCRBY', KEYS[1], 'spent:' .. ARGV[4], charged)
  redis.call('XADD', KEYS[4], 'MINID', '~', cutoff(ARGV[16]), '*', 'type', 'charge', 'amount', 0 - charged, 'balance_after', after, 'request_id', ARGV[1], 'time', ARGV[5])
  redis.call('PEXPIRE', KEYS[4], ARGV[16])
end
redis.call('HSET', KEYS[2], 'state', 'settled', 'charged', charged, 'amount', holdAmt)
redis.call('PEXPIRE', KEYS[2], ${FINISHED_HOLD_MS})
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('XADD', KEYS[5], 'MINID', '~', cutoff(ARGV[17]), '*', 'time', ARGV[15], 'tenant', ARGV[6], 'key_id', ARGV[7], 'alias', ARGV[8], 'model', ARGV[9],
  'prompt', ARGV[10], 'completion', ARGV[11], 'total', ARGV[12], 'requests', ARGV[13], 'request_id', ARGV[1], 'cost', charged, 'estimated', ARGV[14])
redis.call('PEXPIRE', KEYS[5], ARGV[17])
redis.call('HINCRBY', KEYS[6], ARGV[8] .. '|prompt', ARGV[10])
redis.call('HINCRBY', KEYS[6], ARGV[8] .. '|completion', ARGV[11])
redis.call('HINCRBY', KEYS[6], ARGV[8] .. '|requests', ARGV[13])
redis.call('HINCRBY', KEYS[6], ARGV[8] .. '|cost', charged)
redis.call('EXPIRE', KEYS[6], 34560000)
return {1, charged, uncovered, stale}`;
const SETTLE = CUTOFF + SETTLE_BODY;

/** The keys and arguments of one settlement (SETTLE's KEYS and ARGV). */
const SETTLE_KEYS = 7;
const SETTLE_ARGS = 18;

/**
 * Several settlements of one tenant in one script: SETTLE's body, run for each in
 * turn with its own KEYS and ARGV (the parameters shadow the script's), exactly
 * as it runs alone. Each runs under pcall: one that fails (its writes up to the
 * failure kept, as for the script alone) answers {'error', message} and the
 * others go on. Returns one SETTLE answer per settlement, in order.
 */
const SETTLE_MANY = CUTOFF + `
local function settle(KEYS, ARGV)
` + SETTLE_BODY + `
end
local out = {}
local n = #KEYS / ${SETTLE_KEYS}
for i = 0, n - 1 do
  local k, a = {}, {}
  for j = 1, ${SETTLE_KEYS} do k[j] = KEYS[i * ${SETTLE_KEYS} + j] end
  for j = 1, ${SETTLE_ARGS} do a[j] = ARGV[i * ${SETTLE_ARGS} + j] end
  local ok, r = pcall(settle, k, a)
  if ok then out[i + 1] = r
  elseif type(r) == 'table' then out[i + 1] = {'error', tostring(r.err or 'ERR settlement failed')}
  else out[i + 1] = {'error', tostring(r)} end
end
return out`;

/**
 * A tombstone for a request with no hold: a reserve or a move for it that arrives late (sent
 * before an outage, executed after it) finds the hold taken and changes nothing.
 */
const TOMBSTONE = `
local function tombstone(hk)
  redis.call('HSET', hk, 'state', 'released', 'amount', 0)
  redis.call('PEXPIRE', hk, ${FINISHED_HOLD_MS})
end
`;

const RELEASE = GIVE_BACK + TOMBSTONE + `
local h = redis.call('HMGET', KEYS[2], 'state', 'amount', 'lease')
if not h[1] then
  tombstone(KEYS[2])
  return 0
end
if h[1] ~= 'held' then return 0 end
giveBack(KEYS[1], tonumber(h[2]), h[3])
redis.call('HSET', KEYS[2], 'state', 'released')
redis.call('ZREM', KEYS[3], ARGV[1])
return 1`;

const CLAIM = `
if redis.call('HGET', KEYS[1], 'state') ~= 'held' then return 0 end
redis.call('HSET', KEYS[1], 'claimed', 1)
if ARGV[1] ~= '' then redis.call('HSET', KEYS[1], 'owner', ARGV[1]) end
return 1`;

/** Lease renewal of open holds: ARGV[1] now, ARGV[2] hold key prefix, ARGV[3] lease (ms), ARGV[4..] request ids (same slot). */
const RENEW = `
local now = tonumber(ARGV[1])
local n = 0
for i = 4, #ARGV do
  local hk = ARGV[2] .. ARGV[i]
  local h = redis.call('HMGET', hk, 'state', 'deadline')
  if h[1] == 'held' then
    local e = now + tonumber(ARGV[3])
    if h[2] and e > tonumber(h[2]) then e = tonumber(h[2]) end
    redis.call('HSET', hk, 'expires', e)
    redis.call('ZADD', KEYS[1], 'XX', e, ARGV[i])
    n = n + 1
  end
end
return n`;

/** Returns 1 released, 2 tombstone written (no hold at all), 0 kept. */
const RELEASE_UNCLAIMED = GIVE_BACK + TOMBSTONE + `
local h = redis.call('HMGET', KEYS[2], 'state', 'amount', 'claimed', 'lease')
if not h[1] then
  tombstone(KEYS[2])
  return 2
end
if h[1] ~= 'held' or h[3] then return 0 end
giveBack(KEYS[1], tonumber(h[2]), h[4])
redis.call('HSET', KEYS[2], 'state', 'released')
redis.call('ZREM', KEYS[3], ARGV[1])
return 1`;

/** Hold keys are built from ARGV[2] .. member; they share the tenant's hash tag (same slot). */
const REAP = GIVE_BACK + `
local rids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, 500)
local n = 0
for _, rid in ipairs(rids) do
  local hk = ARGV[2] .. rid
  local h = redis.call('HMGET', hk, 'state', 'amount', 'lease')
  if h[1] == 'held' then
    giveBack(KEYS[1], tonumber(h[2]), h[3])
    redis.call('HSET', hk, 'state', 'released')
    n = n + 1
  end
  redis.call('ZREM', KEYS[2], rid)
end
return n`;

/** ARGV[5]: now (ms): a deduct that leased credit stands in the way blocks new leases until now + LEASE_BLOCK_MS. */
const ADJUST = CUTOFF + `
local prev = redis.call('GET', KEYS[2])
if prev then return 'R|' .. prev end
local amount = tonumber(ARGV[1])
local a = redis.call('HMGET', KEYS[1], 'balance', 'held', 'leased')
local balance = tonumber(a[1] or '0')
local held = tonumber(a[2] or '0')
-- A deduct leaves at least what is held: requests admitted inside a lease hold part of it.
if amount < 0 and balance + amount < held then
  if balance + amount < held - tonumber(a[3] or '0') then return 'INSUFFICIENT' end
  redis.call('HSET', KEYS[1], 'lease_block', tonumber(ARGV[5]) + ${LEASE_BLOCK_MS})
  return 'LEASED'
end
local after = redis.call('HINCRBY', KEYS[1], 'balance', amount)
local t = 'grant'
if amount < 0 then t = 'deduct' end
local id = redis.call('XADD', KEYS[3], 'MINID', '~', cutoff(ARGV[4]), '*', 'type', t, 'amount', amount, 'balance_after', after, 'reason', ARGV[2], 'time', ARGV[3])
local entry = id .. '|' .. t .. '|' .. string.format('%.0f', amount) .. '|' .. string.format('%.0f', after) .. '|' .. ARGV[3]
redis.call('PEXPIRE', KEYS[3], ARGV[4])
redis.call('SET', KEYS[2], entry, 'EX', 2592000)
return entry`;

/** Stale leases' amounts (KEYS: acct, holds; ARGV: hold key prefix): open leases of an older generation. */
const STALE_LEASED = `
local gen = redis.call('HGET', KEYS[1], 'lease_gen') or '0'
local sum = 0
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, 9999)) do
  local h = redis.call('HMGET', ARGV[1] .. id, 'state', 'lease', 'gen', 'amount')
  if h[1] == 'held' and h[2] and (h[3] or '0') ~= gen then sum = sum + tonumber(h[4]) end
end
return sum`;

/** Drop ARGV[1] from the hold index KEYS[1] only if its score is still ARGV[2] (no reserve re-indexed it meanwhile). */
const UNINDEX = `
if redis.call('ZSCORE', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0`;

type Scripts = {
  reserve: (...args: (string | number)[]) => Promise<number>;
  lease: (...args: (string | number)[]) => Promise<[number, number, number]>;
  move: (...args: (string | number)[]) => Promise<number>;
  release: (...args: (string | number)[]) => Promise<number>;
  reap: (...args: (string | number)[]) => Promise<number>;
  claim: (...args: (string | number)[]) => Promise<number>;
  renew: (...args: (string | number)[]) => Promise<number>;
  releaseUnclaimed: (...args: (string | number)[]) => Promise<number>;
  unindex: (...args: (string | number)[]) => Promise<number>;
  staleLeased: (...args: (string | number)[]) => Promise<number>;
};

function defineScripts(client: RedisClient): Scripts {
  const define = (name: string, numberOfKeys: number, lua: string) => client.defineCommand(`svc_${name}`, { numberOfKeys, lua });
  define('reserve', 5, RESERVE);
  define('lease', 3, LEASE);
  define('move', 4, MOVE);
  define('settle', SETTLE_KEYS, SETTLE);
  // Its number of keys varies: the caller passes it first.
  client.defineCommand('svc_settle_many', { lua: SETTLE_MANY });
  define('release', 3, RELEASE);
  define('reap', 2, REAP);
  define('adjust', 3, ADJUST);
  define('claim', 1, CLAIM);
  define('renew', 1, RENEW);
  define('release_unclaimed', 3, RELEASE_UNCLAIMED);
  define('unindex', 1, UNINDEX);
  define('stale_leased', 2, STALE_LEASED);
  const c = client as unknown as Record<string, (...args: (string | number)[]) => Promise<unknown>>;
  return {
    reserve: (...a) => c.svc_reserve!(...a) as Promise<number>,
    lease: (...a) => c.svc_lease!(...a) as Promise<[number, number, number]>,
    move: (...a) => c.svc_move!(...a) as Promise<number>,
    release: (...a) => c.svc_release!(...a) as Promise<number>,
    reap: (...a) => c.svc_reap!(...a) as Promise<number>,
    claim: (...a) => c.svc_claim!(...a) as Promise<number>,
    renew: (...a) => c.svc_renew!(...a) as Promise<number>,
    releaseUnclaimed: (...a) => c.svc_release_unclaimed!(...a) as Promise<number>,
    unindex: (...a) => c.svc_unindex!(...a) as Promise<number>,
    staleLeased: (...a) => c.svc_stale_leased!(...a) as Promise<number>,
  };
}

const fields = (flat: string[]): Record<string, string> => {
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) out[flat[i] as string] = flat[i + 1] as string;
  return out;
};
const num = (v: string | undefined | null): number => (v ? Number(v) : 0);
const streamTime = (id: string): string => new Date(Number(id.split('-')[0])).toISOString();

export type RedisLedgerOptions = RedisTarget & {
  readonly prefix: string;
  readonly connectTimeoutMs?: number;
  readonly commandTimeoutMs?: number;
  /** ACL user, password and TLS (redisClientOptions). */
  readonly client?: RedisClientOptions;
  /** Default: usage records 90 days, ledger entries 400 days. */
  readonly retention?: StreamRetention;
  /**
   * Replicas that must hold a settlement or a balance change before it counts
   * as written (Redis WAIT after the script, on a connection of their own: see
   * createRedisLedger). Fewer within REPLICA_WAIT_MS: StoreUnavailableError, so
   * the settlement journal retries it (settle is idempotent), and a master that
   * dies before its replica has the write loses nothing. Default 0 (no replicas).
   */
  readonly replicaAcks?: number;
};

const REPLICA_WAIT_MS = 500;

/** SETTLE's answer: applied, charged, uncovered, lease stale (1), fresh (0) or no commitment (-1). */
type SettleReply = [number, number, number, number];
/** A settlement waiting for the end of its together() block. */
interface QueuedSettlement {
  readonly args: (string | number)[];
  resolve(r: SettleReply): void;
  reject(err: unknown): void;
}
/** Settlements per SETTLE_MANY script: a bound on how long one script keeps Redis from others (about 60 µs each). */
const SETTLE_BATCH = 32;

export function createRedisLedger(opts: RedisLedgerOptions): Ledger {
  const retention = checkRetention(opts.retention ?? DEFAULT_RETENTION);
  const replicaAcks = opts.replicaAcks ?? 0;
  if (!Number.isSafeInteger(replicaAcks) || replicaAcks < 0) throw new TypeError('replicaAcks must be a whole number >= 0');
  const connect = () =>
    connectRedis(opts, {
      connectTimeoutMs: opts.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
      commandTimeoutMs: opts.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS,
      client: opts.client,
    });
  const main = connect();
  const { client, redis } = main;
  const scripts = defineScripts(client);
  // WAIT holds the connection it is sent on until the replicas acknowledge or
  // REPLICA_WAIT_MS passes, and everything sent after it on that connection
  // waits too. With a replica gone every settlement's WAIT runs out: on a shared
  // connection each admission's script then queued behind them and ran into the
  // command timeout (503 for most requests while the settlements were journaled).
  // The writes that wait for replicas get a connection of their own.
  const waiting = replicaAcks > 0 ? connect() : main;
  if (waiting !== main) defineScripts(waiting.client);
  const close = async (): Promise<void> => {
    await Promise.all([main.close(), waiting.close()]);
  };
  const p = opts.prefix;
  const enc = encodeURIComponent;
  const k = {
    acct: (t: string) => `${p}:acct:{${enc(t)}}`,
    holdPrefix: (t: string) => `${p}:hold:{${enc(t)}}:`,
    hold: (t: string, rid: string) => `${p}:hold:{${enc(t)}}:${enc(rid)}`,
    holds: (t: string) => `${p}:holds:{${enc(t)}}`,
    ledger: (t: string) => `${p}:ledger:{${enc(t)}}`,
    usage: (t: string) => `${p}:usage:{${enc(t)}}`,
    day: (t: string, day: string) => `${p}:usage:{${enc(t)}}:day:${day}`,
    rl: (t: string, scope: string, minute: number, kind: 'r' | 't') => `${p}:rl:{${enc(t)}}:${enc(scope)}:${minute}:${kind}`,
    idem: (t: string, key: string) => `${p}:idem:{${enc(t)}}:${enc(key)}`,
    holding: `${p}:holding`,
  };

  /**
   * The hold index: before a reserve's script runs, its tenant is in `holding`
   * with a score at least the new hold's deadline (written again only once the
   * score this instance wrote is less than half a hold ttl ahead, so a busy
   * tenant costs one extra write per half ttl, not per request). An entry is
   * dropped only when its score has passed and the tenant has no open hold, by
   * compare-and-delete on the score, so a concurrent reserve keeps it.
   */
  /**
   * Runs a money script and, when replicas must acknowledge, WAITs for them on
   * the same node (a pipeline: the Cluster client sends both where the script's
   * keys live), over the connection kept for writes that wait.
   */
  async function replicated<T>(name: string, args: (string | number)[]): Promise<T> {
    if (replicaAcks === 0) {
      const c = client as unknown as Record<string, (...a: (string | number)[]) => Promise<T>>;
      return redis(() => c[name]!(...args));
    }
    const pipe = waiting.client.pipeline() as unknown as Record<string, (...a: (string | number)[]) => unknown> & { wait(n: number, ms: number): unknown; exec(): Promise<Array<[Error | null, unknown]> | null> };
    pipe[name]!(...args);
    pipe.wait(replicaAcks, REPLICA_WAIT_MS);
    let results: Array<[Error | null, unknown]> | null;
    try {
      results = await waiting.redis(() => pipe.exec());
    } catch (err) {
      // Nothing but these writes uses this connection: after a failover it looks for the new master itself.
      refreshRouting(waiting.client);
      throw err;
    }
    const [script, wait] = results ?? [];
    if (!script || !wait) throw new StoreUnavailableError(new Error('pipeline returned nothing'));
    if (script[0]) {
      refreshRouting(waiting.client);
      throw toStoreError(script[0]);
    }
    if (wait[0]) throw toStoreError(wait[0]);
    if (Number(wait[1]) < replicaAcks) throw new NotReplicatedError(new Error(`written, but on ${Number(wait[1])} of ${replicaAcks} replicas`));
    return script[1] as T;
  }

  const indexedUntil = new Map<string, number>();
  async function indexHolder(tenantId: string, now: number, holdTtlSeconds: number): Promise<void> {
    const ttlMs = holdTtlSeconds * 1000;
    const until = indexedUntil.get(tenantId);
    if (until !== undefined && until - now >= ttlMs / 2) return;
    const score = now + ttlMs;
    await redis(() => client.zadd(k.holding, 'GT', score, tenantId));
    if (indexedUntil.size > 100_000) indexedUntil.clear();
    indexedUntil.set(tenantId, score);
  }

  const toEntry = (id: string, f: Record<string, string>): LedgerEntry => ({
    id,
    time: f.time ?? streamTime(id),
    type: f.type as LedgerEntry['type'],
    amount: num(f.amount),
    balanceAfter: num(f.balance_after),
    requestId: f.request_id ? decodeURIComponent(f.request_id) : null,
    // Grants and deducts always carry a reason (possibly empty); charges have none.
    reason: f.type === 'grant' || f.type === 'deduct' ? (f.reason ?? '') : null,
  });

  const writers = waiting === main ? [client] : [client, waiting.client];

  const settleOne = (args: (string | number)[]) => replicated<SettleReply>('svc_settle', args);
  /** The settlements asked for inside the together() block under way, by tenant; null outside one. */
  let batch: Map<string, QueuedSettlement[]> | null = null;

  /**
   * A together() block's settlements, one script per tenant (SETTLE_MANY, at most
   * SETTLE_BATCH settlements each; a tenant's keys share one Cluster slot). Each
   * settlement keeps its own answer; a failure of the whole script (Redis away, the
   * command's deadline) is every one's, and the journal retries each (idempotent).
   */
  const sendBatch = (byTenant: Map<string, QueuedSettlement[]>): void => {
    for (const queued of byTenant.values()) {
      for (let i = 0; i < queued.length; i += SETTLE_BATCH) {
        const part = queued.slice(i, i + SETTLE_BATCH);
        if (part.length === 1) {
          const only = part[0]!;
          settleOne(only.args).then(only.resolve, only.reject);
          continue;
        }
        const keys: (string | number)[] = [];
        const argv: (string | number)[] = [];
        for (const q of part) {
          for (let j = 0; j < SETTLE_KEYS; j++) keys.push(q.args[j]!);
          for (let j = SETTLE_KEYS; j < q.args.length; j++) argv.push(q.args[j]!);
        }
        replicated<Array<SettleReply | ['error', string]>>('svc_settle_many', [keys.length, ...keys, ...argv]).then(
          (replies) => {
            part.forEach((q, j) => {
              const r = replies[j];
              if (!Array.isArray(r)) q.reject(new StoreUnavailableError(new Error('a settlement without an answer')));
              else if (r[0] === 'error') q.reject(toStoreError(new ReplyError(String(r[1]))));
              else q.resolve(r as SettleReply);
            });
          },
          (err: unknown) => {
            for (const q of part) q.reject(err);
          },
        );
      }
    }
  };

  return {
    together(run: () => void): void {
      if (batch) {
        run();
        return;
      }
      const mine = new Map<string, QueuedSettlement[]>();
      batch = mine;
      corked(writers, () => {
        try {
          run();
        } finally {
          batch = null;
          sendBatch(mine);
        }
      });
    },

    async reserve(raw: ReserveInput): Promise<ReserveOutcome> {
      const input = checkReserve(raw);
      const t = input.tenantId;
      const scope = input.limits?.scopeId ?? t;
      const rpm = input.limits?.requestsPerMinute ?? -1;
      const tpm = input.limits?.tokensPerMinute ?? -1;
      await indexHolder(t, input.now, input.holdTtlSeconds);
      const r = await redis(() =>
        scripts.reserve(
          k.acct(t), k.hold(t, input.requestId), k.holds(t), k.rl(t, scope, input.minute, 'r'), k.rl(t, scope, input.minute, 't'),
          input.amount, input.tokens, input.creditCheck ? '1' : '0', input.period, rpm, tpm, input.now, input.holdTtlSeconds,
          input.keyId ?? '', enc(input.requestId), input.leaseSeconds ?? input.holdTtlSeconds, input.owner ?? '',
        ),
      );
      if (r === 1) return { ok: true, replay: false };
      if (r === 2) return { ok: true, replay: true };
      return { ok: false, reason: r === -1 ? 'insufficient_credit' : r === -2 ? 'spend_cap_exceeded' : 'rate_limit_exceeded' };
    },

    async extendLease(raw: LeaseInput): Promise<LeaseOutcome> {
      const input = checkLease(raw);
      const t = input.tenantId;
      await indexHolder(t, input.now, input.holdTtlSeconds);
      const [granted, total, gone] = await redis(() =>
        scripts.lease(
          k.acct(t), k.hold(t, input.leaseId), k.holds(t),
          input.amount, input.minimum, input.headroom, input.creditCheck ? '1' : '0', input.period, input.now, input.holdTtlSeconds,
          Math.floor(input.leaseSeconds * 1000), input.owner, enc(input.leaseId),
        ),
      );
      return { granted: Number(granted), total: Number(total), gone: gone === 1 };
    },

    async moveFromLease(raw: MoveInput): Promise<MoveOutcome> {
      const input = checkMove(raw);
      const t = input.tenantId;
      await indexHolder(t, input.now, input.holdTtlSeconds);
      const r = await redis(() =>
        scripts.move(
          k.hold(t, input.leaseId), k.hold(t, input.requestId), k.holds(t), k.acct(t),
          input.amount, input.now, input.holdTtlSeconds, Math.floor(input.leaseSeconds * 1000), input.period, input.keyId ?? '',
          input.owner, enc(input.requestId), enc(input.leaseId), input.admitted === true ? '1' : '0', input.claim === true ? '1' : '0',
        ),
      );
      return r === 1 ? 'moved' : r === 2 ? 'exists' : r === 3 ? 'stale' : 'no_lease';
    },

    async settle(raw: SettleInput): Promise<SettleOutcome> {
      const input = checkSettle(raw);
      const t = input.tenantId;
      const u = input.usage;
      const c = input.lease;
      const args = [
          k.acct(t), k.hold(t, input.requestId), k.holds(t), k.ledger(t), k.usage(t), k.day(t, input.day), k.hold(t, c ? c.id : input.requestId),
          enc(input.requestId), input.charge, input.creditCheck ? '1' : '0', input.period, new Date(input.now).toISOString(),
          t, u.keyId ?? '', u.alias, u.internalModel, u.promptTokens, u.completionTokens, u.totalTokens, u.requestCount,
          u.estimated ? '1' : '0', u.time, retention.ledgerMs, retention.usageRecordMs, c ? c.amount : '',
      ];
      // Inside together(): sent with the block's other settlements of this tenant when it ends.
      const queue = batch;
      const [applied, charged, uncovered, stale] = await (queue
        ? new Promise<SettleReply>((resolve, reject) => {
            const list = queue.get(t);
            const q = { args, resolve, reject };
            if (list) list.push(q);
            else queue.set(t, [q]);
          })
        : settleOne(args));
      const out = { applied: applied === 1, charged: Number(charged), uncovered: Number(uncovered) };
      return stale === 1 || stale === 0 ? { ...out, leaseStale: stale === 1 } : out;
    },

    async release(tenantId, requestId) {
      nonEmpty(tenantId, 'tenantId');
      nonEmpty(requestId, 'requestId');
      const r = await redis(() => scripts.release(k.acct(tenantId), k.hold(tenantId, requestId), k.holds(tenantId), enc(requestId)));
      return r === 1;
    },

    async claim(tenantId, requestId, owner) {
      nonEmpty(tenantId, 'tenantId');
      nonEmpty(requestId, 'requestId');
      return (await redis(() => scripts.claim(k.hold(tenantId, requestId), owner ?? ''))) === 1;
    },

    async renewLeases(tenantId, requestIds, now, leaseSeconds) {
      checkRenew(tenantId, requestIds, now, leaseSeconds);
      if (requestIds.length === 0) return 0;
      const leaseMs = Math.floor(leaseSeconds * 1000);
      return redis(() => scripts.renew(k.holds(tenantId), now, k.holdPrefix(tenantId), leaseMs, ...requestIds.map(enc)));
    },

    async releaseUnclaimed(tenantId, requestId) {
      nonEmpty(tenantId, 'tenantId');
      nonEmpty(requestId, 'requestId');
      const r = await redis(() => scripts.releaseUnclaimed(k.acct(tenantId), k.hold(tenantId, requestId), k.holds(tenantId), enc(requestId)));
      return r === 1 ? 'released' : r === 2 ? 'tombstone' : 'kept';
    },

    async reapExpired(tenantId, now) {
      nonEmpty(tenantId, 'tenantId');
      instant(now, 'now');
      return redis(() => scripts.reap(k.acct(tenantId), k.holds(tenantId), now, k.holdPrefix(tenantId)));
    },

    async tenantsWithHolds() {
      const flat = await redis(() => client.zrange(k.holding, '0', '-1', 'WITHSCORES'));
      const entries: Array<[string, string]> = [];
      for (let i = 0; i + 1 < flat.length; i += 2) entries.push([flat[i] as string, flat[i + 1] as string]);
      const counts = await redis(() => Promise.all(entries.map(([t]) => client.zcard(k.holds(t)))));
      const now = Date.now();
      const found: string[] = [];
      const stale: Array<[string, string]> = [];
      entries.forEach((entry, i) => {
        if ((counts[i] ?? 0) > 0) found.push(entry[0]);
        else if (Number(entry[1]) < now) stale.push(entry);
      });
      await redis(() => Promise.all(stale.map(([t, score]) => scripts.unindex(k.holding, t, score))));
      return found;
    },

    async account(tenantId, period): Promise<AccountState> {
      nonEmpty(tenantId, 'tenantId');
      nonEmpty(period, 'period');
      const [balance, held, leased, cap, spent] = await redis(() => client.hmget(k.acct(tenantId), 'balance', 'held', 'leased', 'cap', `spent:${period}`));
      return { balance: num(balance), held: num(held) - num(leased), leased: num(leased), cap: cap === null ? null : Number(cap), spent: num(spent) };
    },

    async adjustBalance(tenantId, amount, idempotencyKey, reason, now) {
      checkAdjust(tenantId, amount, idempotencyKey, reason, now);
      const time = new Date(now).toISOString();
      const r = await replicated<string>('svc_adjust', [k.acct(tenantId), k.idem(tenantId, idempotencyKey), k.ledger(tenantId), amount, reason, time, retention.ledgerMs, now]);
      if (r === 'INSUFFICIENT' || r === 'LEASED') throw new InsufficientBalanceError(r === 'LEASED');
      const replayed = String(r).startsWith('R|'); // the key was applied before: its first entry comes back
      const [id = '', type = 'grant', amt = '0', after = '0', at = time] = String(r).slice(replayed ? 2 : 0).split('|');
      // The reason comes back from the stream entry itself (it may contain "|").
      const stored = await redis(() => client.xrange(k.ledger(tenantId), id, id));
      const f = stored[0] ? fields(stored[0][1]) : {};
      return { id, time: at, type: type as LedgerEntry['type'], amount: Number(amt), balanceAfter: Number(after), requestId: null, reason: f.reason ?? reason, replayed };
    },

    async staleLeased(tenantId) {
      nonEmpty(tenantId, 'tenantId');
      return redis(() => scripts.staleLeased(k.acct(tenantId), k.holds(tenantId), k.holdPrefix(tenantId)));
    },

    async setCap(tenantId, cap) {
      nonEmpty(tenantId, 'tenantId');
      if (cap !== null) nonNegativeInteger(cap, 'cap');
      // The tenant's credit leases were granted under the old cap: they go stale with it (one transaction, one slot).
      const tx = client.multi();
      if (cap === null) tx.hdel(k.acct(tenantId), 'cap');
      else tx.hset(k.acct(tenantId), 'cap', cap);
      tx.hincrby(k.acct(tenantId), 'lease_gen', 1);
      const results = await redis(() => tx.exec());
      if (!results) throw new StoreUnavailableError(new Error('transaction discarded'));
      for (const [err] of results) if (err) throw toStoreError(err);
    },

    async ledger(tenantId, limit, before) {
      if (checkListing(tenantId, limit) === 0) return [];
      const end = before === undefined ? '+' : `(${before}`;
      const rows = (await redis(() => client.xrevrange(k.ledger(tenantId), end, '-', 'COUNT', limit))) ?? [];
      return rows.map(([id, flat]) => toEntry(id, fields(flat)));
    },

    async usageRecords(tenantId, limit): Promise<UsageRecord[]> {
      if (checkListing(tenantId, limit) === 0) return [];
      const rows = (await redis(() => client.xrevrange(k.usage(tenantId), '+', '-', 'COUNT', limit))) ?? [];
      return rows.map(([, flat]) => {
        const f = fields(flat);
        return {
          time: f.time ?? '',
          tenantId: f.tenant ?? tenantId,
          keyId: f.key_id || null,
          alias: f.alias ?? '',
          internalModel: f.model ?? '',
          promptTokens: num(f.prompt),
          completionTokens: num(f.completion),
          totalTokens: num(f.total),
          requestCount: num(f.requests),
          requestId: decodeURIComponent(f.request_id ?? ''),
          cost: num(f.cost),
          estimated: f.estimated === '1',
        };
      });
    },

    async usageByDay(tenantId, fromDay, toDay): Promise<UsageDay[]> {
      nonEmpty(tenantId, 'tenantId');
      const days = daysBetween(fromDay, toDay);
      const hashes = await redis(() => Promise.all(days.map((d) => client.hgetall(k.day(tenantId, d)))));
      const out: UsageDay[] = [];
      days.forEach((day, i) => {
        const h = hashes[i] ?? {};
        const aliases = [...new Set(Object.keys(h).map((f) => f.slice(0, f.lastIndexOf('|'))))].sort();
        for (const alias of aliases) {
          out.push({
            day,
            alias,
            promptTokens: num(h[`${alias}|prompt`]),
            completionTokens: num(h[`${alias}|completion`]),
            requests: num(h[`${alias}|requests`]),
            cost: num(h[`${alias}|cost`]),
          });
        }
      });
      return out;
    },

    async ping() {
      await redis(() => pingEvery(client));
      // The connection of the writes that wait for replicas must reach every master too (and a
      // slot without one makes it fetch the slot map, as the first does).
      if (waiting !== main) await waiting.redis(() => pingEvery(waiting.client));
    },

    close,
  };
}
