/**
 * The auto top-up trigger on both stores: fires once per crossing of the
 * threshold (however many checks run at once), re-arms when the available
 * balance is back at or above it, and never fires when cleared.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { mergeConfig, parseConfig } from '../../sidecar/src/config/load.js';
import { createAutoTopupTrigger, type AutoTopupTrigger } from '../../sidecar/src/store/auto-topup-trigger.js';
import { createLedger } from '../../sidecar/src/store/create.js';
import type { Ledger } from '../../sidecar/src/store/ledger-contract.js';
import { type RedisServer, startRedis } from '../harness/redis.js';

let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedis();
}, 30_000);
afterAll(async () => {
  await redis?.stop();
});

const stores: Array<[string, () => Record<string, unknown>]> = [
  ['memory', () => ({})],
  ['redis', () => ({ store: { kind: 'redis', url: redis.url } })],
];

describe.each(stores)('%s trigger', (_kind, store) => {
  let n = 0;
  const setup = (): { ledger: Ledger; trigger: AutoTopupTrigger; tenant: string } => {
    const cfg = parseConfig(mergeConfig(defaultConfig('svc'), store()));
    const ledger = createLedger(cfg);
    n += 1;
    return { ledger, trigger: createAutoTopupTrigger(cfg, ledger), tenant: `ten_trigger_${Date.now()}_${n}` };
  };

  it('fires exactly once for many simultaneous checks below the threshold, and again only after the balance was back above it', async () => {
    const { ledger, trigger, tenant } = setup();
    try {
      await ledger.adjustBalance(tenant, 1_000, 'open', '', Date.now());
      expect(await trigger.check(tenant)).toBe(false); // nothing set
      await trigger.arm(tenant, 500);
      expect(await trigger.check(tenant)).toBe(false); // above
      await ledger.adjustBalance(tenant, -600, 'spend', '', Date.now());
      const fired = await Promise.all(Array.from({ length: 50 }, () => trigger.check(tenant)));
      expect(fired.filter(Boolean)).toHaveLength(1);
      expect(await trigger.check(tenant)).toBe(false); // still below, already fired
      await ledger.adjustBalance(tenant, 1_000, 'topup', '', Date.now());
      expect(await trigger.check(tenant)).toBe(false); // above again: re-armed
      await ledger.adjustBalance(tenant, -1_200, 'spend2', '', Date.now());
      expect(await trigger.check(tenant)).toBe(true); // the second crossing
      await trigger.arm(tenant, null);
      await ledger.adjustBalance(tenant, 5_000, 'up', '', Date.now());
      await ledger.adjustBalance(tenant, -5_000, 'down', '', Date.now());
      expect(await trigger.check(tenant)).toBe(false); // cleared
    } finally {
      await trigger.close();
      await ledger.close();
    }
  });

  it('credit set aside in a credit lease does not count as spent: only requests\' holds lower the available balance', async () => {
    const { ledger, trigger, tenant } = setup();
    try {
      await ledger.adjustBalance(tenant, 1_000, 'open', '', Date.now());
      await trigger.arm(tenant, 800);
      const lease = { tenantId: tenant, leaseId: 'lease_t', amount: 250, minimum: 1, headroom: 1, creditCheck: true, period: '2026-11', holdTtlSeconds: 60, leaseSeconds: 15, owner: 'i', now: Date.now() };
      expect((await ledger.extendLease(lease)).granted).toBe(250);
      expect(await trigger.check(tenant)).toBe(false); // 1000 available as the customer sees it
      // A request's hold moved out of the lease does lower it: 1000 - 250 < 800.
      await ledger.moveFromLease({ tenantId: tenant, leaseId: 'lease_t', requestId: 'req_1', keyId: null, amount: 250, period: '2026-11', holdTtlSeconds: 60, leaseSeconds: 15, owner: 'i', now: Date.now() });
      expect(await trigger.check(tenant)).toBe(true);
    } finally {
      await trigger.close();
      await ledger.close();
    }
  });
});
