/** GET /v1/usage as the domain builds it: date range rules, the account and period figures, per-day rows and totals. */
import { describe, expect, it } from 'vitest';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import type { Principal } from '../../sidecar/src/domain/auth/principal.js';
import { usageReport } from '../../sidecar/src/domain/billing/usage-report.js';
import { StoreUnavailableError } from '../../sidecar/src/store/contract.js';
import type { AccountState, Ledger, UsageDay } from '../../sidecar/src/store/ledger-contract.js';
import { createMemoryLedger } from '../../sidecar/src/store/memory-ledger.js';

const cfg = parseConfig(defaultConfig('svc'));
const principal: Principal = { subjectId: 'key_1', tenantId: 'ten_1', method: 'api_key', scopes: ['ai'], keyId: 'key_1', role: null };
const NOW = Date.UTC(2026, 10, 17, 9, 30); // 2026-11-17
const ACCOUNT: AccountState = { balance: 5_000, held: 1_200, leased: 0, cap: 9_000, spent: 2_500 };
const DAYS: UsageDay[] = [
  { day: '2026-11-02', alias: 'svc-core', promptTokens: 10, completionTokens: 5, requests: 2, cost: 30 },
  { day: '2026-11-03', alias: 'svc-embed', promptTokens: 7, completionTokens: 0, requests: 3, cost: 60 },
];

/** The memory ledger answering with fixed figures, recording what it was asked. */
function ledger(over: Partial<Ledger> = {}) {
  const asked: unknown[][] = [];
  const l: Ledger = {
    ...createMemoryLedger(),
    account: async (...a) => (asked.push(['account', ...a]), ACCOUNT),
    usageByDay: async (...a) => (asked.push(['usageByDay', ...a]), DAYS),
    ...over,
  };
  return { l, asked };
}

const report = async (query: string, l: Ledger = ledger().l, now = NOW) => usageReport(l, cfg.billing, 'svc', principal, query, 'req-u', now);
const bodyOf = async (query: string, l?: Ledger, now?: number) => {
  const r = await report(query, l, now);
  if (!r.ok) throw new Error(`refused: ${r.error.entry.code}`);
  return JSON.parse(r.body);
};
const refusal = async (query: string) => {
  const r = await report(query);
  return r.ok ? null : { code: r.error.entry.code, param: r.error.param };
};

describe('usageReport', () => {
  it('by default covers this month so far, for the caller tenant', async () => {
    const { l, asked } = ledger();
    const body = await bodyOf('', l);
    expect(body.range).toEqual({ from: '2026-11-01', to: '2026-11-17' });
    expect(asked).toEqual([
      ['account', 'ten_1', '2026-11'],
      ['usageByDay', 'ten_1', '2026-11-01', '2026-11-17'],
    ]);
  });

  it('the account, the period and the rows, with totals and the request id under the brand', async () => {
    const body = await bodyOf('from=2026-11-02&to=2026-11-03');
    expect(body).toEqual({
      object: 'usage',
      currency: cfg.billing.currency,
      amounts_in: 'micro-units (1/1,000,000 of the currency)',
      credit_check: cfg.billing.creditCheck,
      balance: 5_000,
      held: 1_200,
      available: 3_800,
      period: { start: '2026-11-01', end: '2026-11-30', spend: 2_500, spend_cap: 9_000 },
      range: { from: '2026-11-02', to: '2026-11-03' },
      data: [
        { date: '2026-11-02', alias: 'svc-core', requests: 2, prompt_tokens: 10, completion_tokens: 5, total_tokens: 15, cost: 30 },
        { date: '2026-11-03', alias: 'svc-embed', requests: 3, prompt_tokens: 7, completion_tokens: 0, total_tokens: 7, cost: 60 },
      ],
      totals: { requests: 5, prompt_tokens: 17, completion_tokens: 5, total_tokens: 22, cost: 90 },
      svc: { request_id: 'req-u' },
    });
  });

  it('the period ends on the last day of the month (leap February, December)', async () => {
    expect((await bodyOf('', undefined, Date.UTC(2028, 1, 10))).period).toMatchObject({ start: '2028-02-01', end: '2028-02-29' });
    expect((await bodyOf('', undefined, Date.UTC(2026, 11, 31, 23))).period).toMatchObject({ start: '2026-12-01', end: '2026-12-31' });
  });

  it('no usage: empty rows and zero totals', async () => {
    const body = await bodyOf('', ledger({ usageByDay: async () => [] }).l);
    expect(body.data).toEqual([]);
    expect(body.totals).toEqual({ requests: 0, prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, cost: 0 });
  });

  it('dates must be real UTC days written YYYY-MM-DD; the parameter at fault is named', async () => {
    for (const bad of ['x', '2026-11-1', '2026-02-30', '2026-13-01', '20261101', ' 2026-11-01', '2026-11-01T00:00:00Z']) {
      expect(await refusal(`from=${encodeURIComponent(bad)}`)).toEqual({ code: 'invalid_request', param: 'from' });
      expect(await refusal(`from=2026-11-01&to=${encodeURIComponent(bad)}`)).toEqual({ code: 'invalid_request', param: 'to' });
    }
  });

  it('the range runs forwards and spans at most 366 days, both ends included', async () => {
    expect(await refusal('from=2026-11-02&to=2026-11-01')).toEqual({ code: 'invalid_request', param: 'to' });
    expect((await bodyOf('from=2026-11-02&to=2026-11-02')).range).toEqual({ from: '2026-11-02', to: '2026-11-02' });
    expect((await bodyOf('from=2025-11-01&to=2026-11-01')).range).toEqual({ from: '2025-11-01', to: '2026-11-01' }); // 366 days
    expect(await refusal('from=2025-10-31&to=2026-11-01')).toEqual({ code: 'invalid_request', param: 'to' }); // 367
  });

  it('a store outage is 503 credits_unavailable; any other failure is not hidden', async () => {
    const down = ledger({ account: () => Promise.reject(new StoreUnavailableError()) }).l;
    const r = await report('', down);
    expect(!r.ok && r.error.entry.code).toBe('credits_unavailable');
    const broken = ledger({ usageByDay: () => Promise.reject(new TypeError('bug')) }).l;
    await expect(report('', broken)).rejects.toThrow('bug');
  });
});
