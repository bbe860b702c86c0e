/**
 * When auto top-up fires: the available balance (balance − held) fell below
 * the workspace's threshold, and it was at or above it since the last firing
 * (or since auto top-up was set). One atomic step decides, so however many
 * settlements cross the threshold at the same moment, exactly one caller is
 * told "fire"; the others see it already fired. It re-arms when the available
 * balance is seen at or above the threshold again (after the top-up landed).
 *
 * Redis: one script over the tenant's ledger hash and this state (both under
 * the tenant's hash tag):
 *   <p>:autotopup:{t}   hash   threshold, armed (1|0)
 * It runs after a settlement rather than inside the settlement script, so the
 * settlement stays the ledger's own script; the decision is still one atomic
 * read of the balance and the armed flag.
 */
import type { Config } from '../config/schema.js';
import type { Ledger } from './ledger-contract.js';
import { redisClientOptions } from './redis-client-options.js';
import { connectRedis, DEFAULT_COMMAND_TIMEOUT_MS, DEFAULT_CONNECT_TIMEOUT_MS } from './redis-connection.js';
import { storeTarget } from './target.js';

export interface AutoTopupTrigger {
  /** Sets (and arms) the threshold, or clears it (null: auto top-up off). */
  arm(tenantId: string, threshold: number | null): Promise<void>;
  /** After a settlement: true when this caller must charge the saved card now. */
  check(tenantId: string): Promise<boolean>;
  close(): Promise<void>;
}

const CHECK = `
local t = redis.call('HMGET', KEYS[2], 'threshold', 'armed')
if not t[1] then return 0 end
-- Credit set aside in instances' credit leases is not held by a request: available as the customer sees it.
local a = redis.call('HMGET', KEYS[1], 'balance', 'held', 'leased')
local available = tonumber(a[1] or '0') - tonumber(a[2] or '0') + tonumber(a[3] or '0')
if available >= tonumber(t[1]) then
  if t[2] ~= '1' then redis.call('HSET', KEYS[2], 'armed', '1') end
  return 0
end
if t[2] == '1' then redis.call('HSET', KEYS[2], 'armed', '0') return 1 end
return 0`;

export function createAutoTopupTrigger(cfg: Config, ledger: Ledger): AutoTopupTrigger {
  if (cfg.store.kind === 'memory') return memoryTrigger(ledger);
  const { client, redis, close } = connectRedis(storeTarget(cfg.store), {
    connectTimeoutMs: DEFAULT_CONNECT_TIMEOUT_MS,
    commandTimeoutMs: DEFAULT_COMMAND_TIMEOUT_MS,
    client: redisClientOptions(cfg.store),
  });
  const enc = encodeURIComponent;
  const acct = (t: string) => `${cfg.brand}:acct:{${enc(t)}}`;
  const state = (t: string) => `${cfg.brand}:autotopup:{${enc(t)}}`;
  return {
    async arm(tenantId, threshold) {
      if (threshold === null) await redis(() => client.del(state(tenantId)));
      else await redis(() => client.hset(state(tenantId), 'threshold', threshold, 'armed', '1'));
    },
    async check(tenantId) {
      return (await redis(() => client.eval(CHECK, 2, acct(tenantId), state(tenantId)))) === 1;
    },
    close,
  };
}

/** The embedded store: the decision is one synchronous step after reading the balance, so no two callers both fire. */
function memoryTrigger(ledger: Ledger): AutoTopupTrigger {
  const states = new Map<string, { threshold: number; armed: boolean }>();
  return {
    async arm(tenantId, threshold) {
      if (threshold === null) states.delete(tenantId);
      else states.set(tenantId, { threshold, armed: true });
    },
    async check(tenantId) {
      if (!states.has(tenantId)) return false;
      const a = await ledger.account(tenantId, 'none');
      const s = states.get(tenantId);
      if (!s) return false;
      if (a.balance - a.held >= s.threshold) {
        s.armed = true;
        return false;
      }
      if (!s.armed) return false;
      s.armed = false;
      return true;
    },
    async close() {},
  };
}
