import type { Config } from '../../config/schema.js';
import { StoreUnavailableError } from '../../store/contract.js';
import type { Ledger, UsageDay } from '../../store/ledger-contract.js';
import type { Principal } from '../auth/principal.js';
import { Errors, gatewayError, type GatewayError } from '../errors.js';
import { dayOf, periodOf } from './pricing.js';

/**
 * GET /v1/usage: the caller's balance, the current spend period and cap, and
 * usage by day and alias over a range (query `from` and `to`, UTC days,
 * inclusive; default: this month so far; at most 366 days). Amounts are
 * integer micro-units of `currency`. Aliases only; no internal model names.
 */
const DAY = /^\d{4}-\d{2}-\d{2}$/;
const MAX_DAYS = 366;

function validDay(s: string): boolean {
  if (!DAY.test(s)) return false;
  const t = Date.parse(`${s}T00:00:00Z`);
  return Number.isFinite(t) && new Date(t).toISOString().slice(0, 10) === s;
}

function endOfMonth(period: string): string {
  const [y, m] = period.split('-').map(Number) as [number, number];
  return new Date(Date.UTC(y, m, 0)).toISOString().slice(0, 10);
}

export async function usageReport(
  ledger: Ledger,
  billing: Config['billing'],
  brand: string,
  principal: Principal,
  query: string,
  requestId: string,
  now: number = Date.now(),
): Promise<{ ok: true; body: string } | { ok: false; error: GatewayError }> {
  const params = new URLSearchParams(query);
  const today = dayOf(now);
  const period = periodOf(now);
  const from = params.get('from') ?? `${period}-01`;
  const to = params.get('to') ?? today;
  for (const [name, value] of [['from', from], ['to', to]] as const) {
    if (!validDay(value)) return { ok: false, error: gatewayError(Errors.invalidRequest, { param: name, message: 'The parameter must be a date YYYY-MM-DD (UTC).' }) };
  }
  const span = (Date.parse(`${to}T00:00:00Z`) - Date.parse(`${from}T00:00:00Z`)) / 86_400_000 + 1;
  if (span < 1 || span > MAX_DAYS) {
    return { ok: false, error: gatewayError(Errors.invalidRequest, { param: 'to', message: `to must not be before from, and the range at most ${MAX_DAYS} days.` }) };
  }
  let account;
  let days: UsageDay[];
  try {
    [account, days] = await Promise.all([ledger.account(principal.tenantId, period), ledger.usageByDay(principal.tenantId, from, to)]);
  } catch (err) {
    if (err instanceof StoreUnavailableError) return { ok: false, error: gatewayError(Errors.creditsUnavailable) };
    throw err;
  }
  const data = days.map((d) => ({
    date: d.day,
    alias: d.alias,
    requests: d.requests,
    prompt_tokens: d.promptTokens,
    completion_tokens: d.completionTokens,
    total_tokens: d.promptTokens + d.completionTokens,
    cost: d.cost,
  }));
  const totals = data.reduce(
    (t, d) => ({
      requests: t.requests + d.requests,
      prompt_tokens: t.prompt_tokens + d.prompt_tokens,
      completion_tokens: t.completion_tokens + d.completion_tokens,
      total_tokens: t.total_tokens + d.total_tokens,
      cost: t.cost + d.cost,
    }),
    { requests: 0, prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, cost: 0 },
  );
  const body = {
    object: 'usage',
    currency: billing.currency,
    amounts_in: 'micro-units (1/1,000,000 of the currency)',
    credit_check: billing.creditCheck,
    balance: account.balance,
    held: account.held,
    available: account.balance - account.held,
    period: { start: `${period}-01`, end: endOfMonth(period), spend: account.spent, spend_cap: account.cap },
    range: { from, to },
    data,
    totals,
    [brand]: { request_id: requestId },
  };
  return { ok: true, body: JSON.stringify(body) };
}
