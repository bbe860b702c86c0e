import { createHash, randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { LedgerEntry } from '../../src/store/ledger-contract.js';
import type { AutoTopup, CreditTier, IdempotencyRecord } from '../../src/store/account-contract.js';
import type { AccountDeps } from '../deps.js';
import { requireOwnerOrAdmin, requireSession, resolveCaller } from '../caller.js';
import { AccountError, AccountErrors, parseWith, requestIdOf } from '../http-errors.js';
import { envelope, gatewayError, type ErrorEntry } from '../../src/domain/errors.js';
import { AutoTopupBody, SpendCapBody, TopupBody, TransactionsQuery } from '../schemas.js';
import { decodeCursor, encodeCursor } from '../cursor.js';
import { PaymentUnavailableError } from '../payments/provider.js';
import { setCapRecallingLeases } from '../../src/domain/billing/lease-recall.js';

/** Free amounts are whole cents. */
const CENT = 10_000;
/** How long a resend waits for the first request with its Idempotency-Key to finish. */
const IDEMPOTENT_WAIT_MS = 10_000;
/** A pending Idempotency-Key claim older than this belongs to a request that died. */
const STALE_CLAIM_MS = 60_000;

/**
 * /v1/credits* (billing on): reads for anyone in the workspace (keys too);
 * top-ups for owners and admins (a key acts as its person; save_card takes a
 * session); auto top-up and the spend cap for owners and admins with a session
 * (auto top-up) or either credential (the spend cap).
 */
export function creditRoutes(app: FastifyInstance, deps: AccountDeps): void {
  const clock = deps.now ?? Date.now;
  const iso = () => new Date(clock()).toISOString();
  const caller = (req: FastifyRequest) => resolveCaller(req, deps.cfg.brand, deps.accounts, iso);
  const svc = deps.cfg.accountService;
  const currency = deps.cfg.billing.currency;
  const tiers = async (): Promise<CreditTier[]> => (await deps.accounts.getTiers()) ?? svc.tiers.map((t) => ({ ...t }));
  const period = () => new Date(clock()).toISOString().slice(0, 7);

  /** A tier id or a free amount (whole cents within the configured bounds) → micro-units. */
  async function priceOf(b: { tier?: string | undefined; amount?: number | undefined }): Promise<{ amount: number; tier: string | null }> {
    if (b.tier !== undefined) {
      const t = (await tiers()).find((x) => x.id === b.tier);
      if (!t) throw new AccountError(AccountErrors.unknownCreditTier);
      return { amount: t.amount, tier: t.id };
    }
    const amount = b.amount as number;
    if (amount % CENT !== 0 || amount < svc.minTopupAmount || amount > svc.maxTopupAmount) throw new AccountError(AccountErrors.invalidAmount);
    return { amount, tier: null };
  }

  app.get('/v1/credits', async (req) => {
    const c = await caller(req);
    const p = period();
    const [a, auto, card] = await Promise.all([deps.ledger.account(c.workspaceId, p), deps.accounts.getAutoTopup(c.workspaceId), deps.accounts.getCard(c.workspaceId)]);
    return {
      object: 'credits',
      workspace_id: c.workspaceId,
      currency,
      amounts_in: 'micro_units',
      balance: a.balance,
      held: a.held,
      available: a.balance - a.held,
      spend_cap: a.cap,
      period: { name: p, ...periodBounds(p), spend: a.spent },
      auto_topup: autoView(auto),
      card: card ? { brand: card.brand, last4: card.last4 } : null,
      topup_configured: deps.payments !== null,
    };
  });

  app.get('/v1/credits/tiers', async (req) => {
    await caller(req);
    return { object: 'list', currency, data: (await tiers()).map((t) => ({ object: 'credit_tier', id: t.id, amount: t.amount, label: t.label })) };
  });

  app.get('/v1/credits/transactions', async (req) => {
    const c = await caller(req);
    const q = parseWith(TransactionsQuery, 'query', req.query ?? {});
    const limit = Math.min(q.limit ?? svc.pageSize, svc.maxPageSize);
    const before = q.cursor === undefined ? undefined : decodeCursor(q.cursor);
    if (before === null) throw new AccountError(AccountErrors.invalidCursor);
    const rows = await deps.ledger.ledger(c.workspaceId, limit + 1, before);
    const page = rows.slice(0, limit);
    const more = rows.length > limit;
    return {
      object: 'list',
      currency,
      data: page.map(transactionView),
      has_more: more,
      next_cursor: more && page.length > 0 ? encodeCursor((page[page.length - 1] as LedgerEntry).id) : null,
    };
  });

  app.post('/v1/credits/topup', async (req, reply) => {
    const c = await caller(req);
    const body = parseWith(TopupBody, 'body', req.body ?? {});
    if (body.save_card) requireSession(c);
    requireOwnerOrAdmin(c);
    const price = await priceOf(body);
    const payments = deps.payments;
    if (!payments) throw new AccountError(AccountErrors.topupNotConfigured);
    const saved = body.payment_method === undefined ? await deps.accounts.getCard(c.workspaceId) : null;
    const token = body.payment_method ?? saved?.token;
    if (!token) throw new AccountError(AccountErrors.noCardOnFile);

    const header = req.headers['idempotency-key'];
    const key = typeof header === 'string' && header.length > 0 && header.length <= 200 ? header : null;
    const fingerprint = createHash('sha256').update(JSON.stringify([c.workspaceId, price, token, body.save_card])).digest('hex');
    return idempotent(req, reply, c.workspaceId, key, fingerprint, async () => {
      // Only attempts that reach the provider count (a resend answered from its Idempotency-Key does not).
      const minute = Math.floor(clock() / 60_000);
      if ((await deps.accounts.countInWindow(c.workspaceId, 'topup', minute)) > svc.topupsPerMinute) {
        reply.header('retry-after', String(60 - Math.floor((clock() / 1000) % 60)));
        throw new AccountError(AccountErrors.rateLimited);
      }
      let card;
      try {
        card = await payments.card(token);
      } catch (err) {
        if (err instanceof PaymentUnavailableError) throw new AccountError(AccountErrors.paymentUnavailable);
        throw err;
      }
      if (!card) throw new AccountError(AccountErrors.cardDeclined);
      const chargeKey = `topup:${c.workspaceId}:${key ?? randomUUID()}`;
      let r;
      try {
        r = await payments.charge({ token, amount: price.amount, currency, idempotencyKey: chargeKey, description: 'credit top-up' });
      } catch (err) {
        if (err instanceof PaymentUnavailableError) r = { status: 'failed' as const };
        else throw err;
      }
      if (r.status === 'failed') throw new AccountError(AccountErrors.paymentUnavailable);
      if (r.status === 'declined') return errorResult(AccountErrors.cardDeclined);
      const entry = await deps.ledger.adjustBalance(c.workspaceId, price.amount, `topup:${r.chargeId}`, 'topup', clock());
      if (body.save_card) await deps.accounts.setCard(c.workspaceId, { token, brand: card.brand, last4: card.last4, savedAt: iso() });
      deps.log.info({ tenant_id: c.workspaceId, amount: price.amount, entry_id: entry.id, person_id: c.personId }, 'top-up credited');
      return {
        status: 201,
        body: {
          object: 'topup',
          id: entry.id,
          charge_id: r.chargeId,
          amount: price.amount,
          tier: price.tier,
          currency,
          balance: entry.balanceAfter,
          card: { brand: card.brand, last4: card.last4 },
          card_saved: body.save_card,
          created_at: entry.time,
        },
      };
    });
  });

  app.put('/v1/credits/auto-topup', async (req) => {
    const c = await caller(req);
    requireSession(c);
    requireOwnerOrAdmin(c);
    const body = parseWith(AutoTopupBody, 'body', req.body ?? {});
    const price = await priceOf(body);
    if (!(await deps.accounts.getCard(c.workspaceId))) throw new AccountError(AccountErrors.noCardOnFile);
    const { cap } = await deps.ledger.account(c.workspaceId, period());
    if (cap !== null && price.amount > cap) throw new AccountError(AccountErrors.capBelowAmount);
    const settings: AutoTopup = { enabled: true, threshold: body.threshold, amount: price.amount, tierId: price.tier, disabledReason: null, updatedAt: iso() };
    await deps.accounts.setAutoTopup(c.workspaceId, settings);
    await deps.trigger.arm(c.workspaceId, settings.threshold);
    deps.log.info({ tenant_id: c.workspaceId, threshold: settings.threshold, amount: settings.amount, person_id: c.personId }, 'auto top-up set');
    return autoView(settings);
  });

  app.delete('/v1/credits/auto-topup', async (req) => {
    const c = await caller(req);
    requireSession(c);
    requireOwnerOrAdmin(c);
    await deps.accounts.setAutoTopup(c.workspaceId, null);
    await deps.trigger.arm(c.workspaceId, null);
    deps.log.info({ tenant_id: c.workspaceId, person_id: c.personId }, 'auto top-up off');
    return autoView(null);
  });

  app.get('/v1/credits/spend-cap', async (req) => {
    const c = await caller(req);
    const p = period();
    const a = await deps.ledger.account(c.workspaceId, p);
    return { object: 'spend_cap', currency, spend_cap: a.cap, period: { name: p, ...periodBounds(p), spend: a.spent } };
  });

  app.put('/v1/credits/spend-cap', async (req) => {
    const c = await caller(req);
    requireOwnerOrAdmin(c);
    const body = parseWith(SpendCapBody, 'body', req.body ?? {});
    await setCapRecallingLeases(deps.ledger, deps.recallLeases ?? (async () => {}), c.workspaceId, body.spend_cap, clock);
    deps.log.info({ tenant_id: c.workspaceId, spend_cap: body.spend_cap, person_id: c.personId }, 'spend cap set');
    const p = period();
    const a = await deps.ledger.account(c.workspaceId, p);
    return { object: 'spend_cap', currency, spend_cap: a.cap, period: { name: p, ...periodBounds(p), spend: a.spent } };
  });

  /**
   * Stripe's convention: the first request with an Idempotency-Key runs; a
   * resend with the same body gets the first answer (a resend arriving while
   * the first still runs waits for it), with another body a 409. A transient
   * failure (provider unreachable) drops the claim, so a retry runs again.
   */
  async function idempotent(
    req: FastifyRequest,
    reply: FastifyReply,
    workspaceId: string,
    key: string | null,
    fingerprint: string,
    run: () => Promise<{ status: number; body: unknown }>,
  ): Promise<FastifyReply> {
    const send = (r: { status: number; body: unknown }, replayed: boolean) => {
      if (replayed) reply.header('idempotent-replayed', 'true');
      return reply.code(r.status).type('application/json').send(JSON.stringify(withRequestId(r.body, req)));
    };
    if (key === null) return send(await run(), false);
    const pending: IdempotencyRecord = { fingerprint, state: 'pending', status: 0, body: null, createdAt: iso() };
    const deadline = Date.now() + IDEMPOTENT_WAIT_MS;
    for (;;) {
      const existing = await deps.accounts.claimIdempotency(workspaceId, key, pending);
      if (existing === null) break;
      if (existing.fingerprint !== fingerprint) throw new AccountError(AccountErrors.idempotencyKeyReused);
      if (existing.state === 'done') return send({ status: existing.status, body: existing.body }, true);
      // A claim left by a process that died mid-request: take it over (the provider charge is idempotent by
      // the same key and the credit by the charge id, so running again never charges or credits twice).
      if (clock() - Date.parse(existing.createdAt) > STALE_CLAIM_MS) {
        await deps.accounts.dropIdempotency(workspaceId, key);
        continue;
      }
      if (Date.now() > deadline) throw new AccountError(AccountErrors.idempotencyInProgress);
      await new Promise((r) => setTimeout(r, 25));
    }
    let result;
    try {
      result = await run();
    } catch (err) {
      await deps.accounts.dropIdempotency(workspaceId, key).catch(() => {});
      throw err;
    }
    await deps.accounts.finishIdempotency(workspaceId, key, { ...pending, state: 'done', status: result.status, body: result.body });
    return send(result, false);
  }
}

/** A final error kept as an idempotent result (a declined card stays declined for that key); the request id is filled in when sent. */
function errorResult(entry: ErrorEntry) {
  return { status: entry.status, body: envelope(gatewayError(entry), '') };
}

/** Stored error bodies get the request id of the request being answered. */
function withRequestId(body: unknown, req: FastifyRequest): unknown {
  const e = (body as { error?: Record<string, unknown> } | null)?.error;
  return e ? { error: { ...e, request_id: requestIdOf(req) } } : body;
}

function periodBounds(p: string): { start: string; end: string } {
  const [y, m] = p.split('-').map(Number) as [number, number];
  return { start: new Date(Date.UTC(y, m - 1, 1)).toISOString(), end: new Date(Date.UTC(y, m, 1)).toISOString() };
}

function autoView(a: AutoTopup | null) {
  return {
    object: 'auto_topup',
    enabled: a?.enabled ?? false,
    threshold: a?.threshold ?? null,
    amount: a?.amount ?? null,
    tier: a?.tierId ?? null,
    disabled_reason: a?.disabledReason ?? null,
    updated_at: a?.updatedAt ?? null,
  };
}

/** Ledger entries as a billing page shows them: top-ups, auto top-ups, grants, deducts and charges. */
export function transactionView(e: LedgerEntry) {
  const type = e.type === 'grant' ? (e.reason === 'topup' ? 'topup' : e.reason === 'auto_topup' ? 'auto_topup' : 'grant') : e.type;
  return {
    object: 'transaction',
    id: e.id,
    type,
    amount: e.amount,
    balance_after: e.balanceAfter,
    request_id: e.requestId,
    description: type === 'grant' || type === 'deduct' ? (e.reason ?? '') : null,
    created_at: e.time,
  };
}
