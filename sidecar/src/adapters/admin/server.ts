import { timingSafeEqual, createHash } from 'node:crypto';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { createTenant, issueKey, keyView, OperatorError, revokeKey } from '../../domain/operator.js';
import { adjustRecallingLeases, setCapRecallingLeases } from '../../domain/billing/lease-recall.js';
import { StoreConflictError, StoreUnavailableError, type Store } from '../../store/contract.js';
import { InsufficientBalanceError, type Ledger } from '../../store/ledger-contract.js';
import { isRole, type AccountStore, type CreditTier } from '../../store/account-contract.js';

/**
 * The sidecar's operator API: health, readiness and tenant/key management.
 * Bound to loopback by default and guarded by a bearer admin token compared
 * in constant time. Never reachable through Envoy's public listener.
 */
export interface AdminDeps {
  readonly store: Store;
  readonly ledger: Ledger;
  /** Called after a key was revoked (drops it from caches everywhere). */
  readonly onKeyRevoked?: (hash: string) => void;
  /** Account records (members, roles, tiers); absent: those operator routes are not served. */
  readonly accounts?: AccountStore;
  /** The configured credit tiers (shown when the operator has set none). */
  readonly tiers?: readonly CreditTier[];
  readonly brand: string;
  /** ISO code of billing.currency: money answers carry it next to their micro-units. */
  readonly currency: string;
  readonly adminToken: string;
  readonly log: Logger;
  /** False once a stop has begun: /readyz answers 503 so load balancers send nothing new. */
  readonly accepting?: () => boolean;
  /** Prometheus exposition (GET /metrics, admin token required like every operator endpoint). */
  readonly metrics?: { readonly contentType: string; text(): Promise<string> };
  /** Re-reads the configuration file and applies it on every instance (POST /admin/config/reload). */
  /**
   * Asks every instance (this one included) to give its credit leases of a tenant back: a
   * deduct never takes leased credit, and a new cap applies to requests admitted after it is
   * set. Absent: no instance leases credit to recall.
   */
  readonly recallLeases?: (tenantId: string) => Promise<void>;
  readonly reloadConfig?: () => Promise<{ ok: true; generation: number; moved: readonly string[]; changed: boolean } | { ok: false; problems: readonly string[] }>;
}

const digest = (s: string) => createHash('sha256').update(s).digest();
const clampLimit = (v: string | undefined): number => Math.min(Math.max(Number(v ?? 100) || 100, 1), 10_000);

const PERSON = /^[A-Za-z0-9_.@:-]{1,128}$/;

function validTiers(v: unknown): boolean {
  if (!Array.isArray(v) || v.length > 50) return false;
  const ids = new Set<string>();
  for (const t of v as Array<Record<string, unknown>>) {
    if (!t || typeof t.id !== 'string' || !/^[a-z0-9_-]{1,40}$/.test(t.id) || ids.has(t.id)) return false;
    if (typeof t.amount !== 'number' || !Number.isSafeInteger(t.amount) || t.amount <= 0) return false;
    if (t.label !== undefined && (typeof t.label !== 'string' || t.label.length > 80)) return false;
    ids.add(t.id);
  }
  return true;
}

/** Shorter tokens (an empty or truncated token file above all) would guard nothing. */
export const MIN_ADMIN_TOKEN_LENGTH = 16;

export function buildAdminServer(deps: AdminDeps): FastifyInstance {
  if (deps.adminToken.length < MIN_ADMIN_TOKEN_LENGTH) {
    throw new Error(`the admin token must be at least ${MIN_ADMIN_TOKEN_LENGTH} characters (ADMIN_TOKEN or the file at ADMIN_TOKEN_FILE)`);
  }
  const app = Fastify({ logger: false, bodyLimit: 64 * 1024 });
  const expected = digest(`Bearer ${deps.adminToken}`);
  const requireToken = async (req: FastifyRequest, reply: FastifyReply) => {
    if (!timingSafeEqual(digest(req.headers.authorization ?? ''), expected)) return reply.code(401).send({ error: 'admin token required' });
  };

  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_req, reply) => {
    if (deps.accepting && !deps.accepting()) return reply.code(503).send({ status: 'draining', store: deps.store.kind });
    try {
      // Both connections: keys (authentication) and the ledger (the money path).
      await Promise.all([deps.store.ping(), deps.ledger.ping()]);
      return { status: 'ready', store: deps.store.kind };
    } catch {
      return reply.code(503).send({ status: 'unavailable', store: deps.store.kind });
    }
  });

  app.register(async (admin) => {
    admin.addHook('onRequest', requireToken);

    admin.post<{ Body: { name?: string } }>('/admin/tenants', async (req, reply) => {
      const t = await createTenant(deps.store, String(req.body?.name ?? ''));
      return reply.code(201).send({ id: t.id, name: t.name, created_at: t.createdAt });
    });
    admin.get('/admin/tenants', async () => {
      const list = await deps.store.listTenants();
      return { data: list.map((t) => ({ id: t.id, name: t.name, created_at: t.createdAt })) };
    });
    admin.post<{ Params: { id: string }; Body: { name?: string; scopes?: string[]; allowed_ips?: string[] | null; person_id?: unknown } }>(
      '/admin/tenants/:id/keys',
      async (req, reply) => {
        const b = req.body ?? {};
        const person = b.person_id;
        if (person !== undefined && (typeof person !== 'string' || !PERSON.test(person))) throw new OperatorError(400, 'person_id must be a person id');
        if (person !== undefined && !deps.accounts) throw new OperatorError(400, 'no account records here');
        const { key, record } = await issueKey(deps.store, deps.brand, {
          tenantId: req.params.id,
          name: b.name,
          scopes: b.scopes,
          allowedIps: b.allowed_ips,
        });
        if (typeof person === 'string') await deps.accounts?.setKeyPerson(record.id, person);
        deps.log.info({ key_id: record.id, tenant_id: record.tenantId }, 'key issued');
        return reply.code(201).send({ key, ...keyView(record, deps.brand), person_id: person ?? null });
      },
    );
    admin.get('/metrics', async (_req, reply) => {
      if (!deps.metrics) return reply.code(404).send({ error: 'metrics are not enabled' });
      return reply.header('content-type', deps.metrics.contentType).send(await deps.metrics.text());
    });
    admin.post('/admin/config/reload', async (_req, reply) => {
      if (!deps.reloadConfig) return reply.code(404).send({ error: 'reload is not available' });
      const r = await deps.reloadConfig();
      if (!r.ok) return reply.code(422).send({ error: 'configuration refused; nothing changed', problems: r.problems });
      return { status: r.changed ? 'applied' : 'unchanged', generation: r.generation, aliases_moved: r.moved };
    });
    admin.get<{ Params: { id: string } }>('/admin/tenants/:id/keys', async (req) => {
      const keys = await deps.store.listKeys(req.params.id);
      return { data: keys.map((k) => keyView(k, deps.brand)) };
    });
    admin.post<{ Params: { id: string } }>('/admin/keys/:id/revoke', async (req) => {
      const k = await revokeKey(deps.store, req.params.id);
      deps.onKeyRevoked?.(k.hash);
      deps.log.info({ key_id: k.id, tenant_id: k.tenantId }, 'key revoked');
      return keyView(k, deps.brand);
    });
  });

  const currency = deps.currency;
  const accounts = deps.accounts;
  if (accounts) {
    app.register(async (people) => {
      people.addHook('onRequest', requireToken);
      const memberView = (m: { personId: string; role: string; addedAt: string }) => ({ person_id: m.personId, role: m.role, added_at: m.addedAt });
      // Members of a workspace (the tenant) with their roles; the operator sets a role whatever was there.
      people.get<{ Params: { id: string } }>('/admin/tenants/:id/members', async (req) => ({ data: (await accounts.listMembers(req.params.id)).map(memberView) }));
      people.put<{ Params: { id: string; person: string }; Body: { role?: unknown } }>('/admin/tenants/:id/members/:person', async (req) => {
        const role = req.body?.role;
        if (!isRole(role)) throw new OperatorError(400, 'role must be owner, admin or member');
        if (!PERSON.test(req.params.person)) throw new OperatorError(400, 'not a person id');
        const current = await accounts.getMember(req.params.id, req.params.person);
        if (current && current !== 'removed' && current.role === 'owner' && role !== 'owner') {
          const r = await accounts.setRole(req.params.id, req.params.person, role);
          if (r === 'last_owner') throw new OperatorError(409, 'a workspace always keeps an owner');
        } else await accounts.putMember(req.params.id, { personId: req.params.person, role, addedAt: current && current !== 'removed' ? current.addedAt : new Date().toISOString() });
        return memberView((await accounts.getMember(req.params.id, req.params.person)) as { personId: string; role: string; addedAt: string });
      });
      people.delete<{ Params: { id: string; person: string } }>('/admin/tenants/:id/members/:person', async (req) => {
        const r = await accounts.removeMember(req.params.id, req.params.person);
        if (r === 'not_found') throw new OperatorError(404, 'no such member');
        if (r === 'last_owner') throw new OperatorError(409, 'a workspace always keeps an owner');
        return { person_id: req.params.person, deleted: true };
      });
      // Credit tiers on offer (null: back to the configured ones).
      people.get('/admin/tiers', async () => ({ data: (await accounts.getTiers()) ?? deps.tiers ?? [], source: (await accounts.getTiers()) ? 'operator' : 'config' }));
      people.put<{ Body: { tiers?: unknown } }>('/admin/tiers', async (req) => {
        const tiers = req.body?.tiers;
        if (tiers !== null && !validTiers(tiers)) throw new OperatorError(400, 'tiers must be null or a list of {id, amount (micro-units > 0), label}');
        await accounts.setTiers(tiers === null ? null : (tiers as CreditTier[]).map((t) => ({ id: t.id, amount: t.amount, label: t.label ?? '' })));
        return { data: (await accounts.getTiers()) ?? deps.tiers ?? [] };
      });
    });
  }

  app.register(async (money) => {
    money.addHook('onRequest', requireToken);
    const tenantOf = async (id: string) => {
      if (!(await deps.store.getTenant(id))) throw new OperatorError(404, 'unknown tenant');
      return id;
    };
    // Grant (amount > 0) or deduct (amount < 0) credits, micro-units; idempotent by idempotency_key.
    money.post<{ Params: { id: string }; Body: { amount?: unknown; idempotency_key?: unknown; reason?: unknown } }>(
      '/admin/tenants/:id/credits',
      async (req, reply) => {
        const tenant = await tenantOf(req.params.id);
        const { amount, idempotency_key: key, reason } = req.body ?? {};
        if (typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount === 0) throw new OperatorError(400, 'amount must be a non-zero integer of micro-units');
        if (typeof key !== 'string' || !key || key.length > 200) throw new OperatorError(400, 'idempotency_key is required (1-200 characters)');
        const why = typeof reason === 'string' ? reason.slice(0, 200) : '';
        const entry = await adjustRecallingLeases(deps.ledger, deps.recallLeases ?? (async () => {}), tenant, amount, key, why, Date.now);
        if (entry.replayed) return reply.code(200).send({ ...entry, currency }); // applied before: nothing changed
        deps.log.info({ tenant_id: tenant, amount, entry_id: entry.id }, 'credits adjusted');
        return reply.code(201).send({ ...entry, currency });
      },
    );
    money.put<{ Params: { id: string }; Body: { amount?: unknown } }>('/admin/tenants/:id/cap', async (req) => {
      const tenant = await tenantOf(req.params.id);
      const amount = req.body?.amount;
      if (amount !== null && (typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount < 0)) {
        throw new OperatorError(400, 'amount must be a non-negative integer of micro-units, or null to clear the cap');
      }
      const stale = await setCapRecallingLeases(deps.ledger, deps.recallLeases ?? (async () => {}), tenant, amount, Date.now);
      if (stale > 0) deps.log.warn({ tenant_id: tenant, stale_leased: stale }, 'spend cap set; an instance has not given back its credit lease yet');
      return { tenant_id: tenant, spend_cap: amount, currency };
    });
    money.get<{ Params: { id: string }; Querystring: { period?: string } }>('/admin/tenants/:id/account', async (req) => {
      const tenant = await tenantOf(req.params.id);
      const period = req.query.period ?? new Date().toISOString().slice(0, 7);
      return { tenant_id: tenant, period, currency, ...(await deps.ledger.account(tenant, period)) };
    });
    money.get<{ Params: { id: string }; Querystring: { limit?: string } }>('/admin/tenants/:id/ledger', async (req) => {
      const tenant = await tenantOf(req.params.id);
      return { currency, data: await deps.ledger.ledger(tenant, clampLimit(req.query.limit)) };
    });
    money.get<{ Params: { id: string }; Querystring: { limit?: string } }>('/admin/tenants/:id/usage-records', async (req) => {
      const tenant = await tenantOf(req.params.id);
      return { currency, data: await deps.ledger.usageRecords(tenant, clampLimit(req.query.limit)) };
    });
  });

  app.setErrorHandler((err, _req, reply) => {
    if (err instanceof InsufficientBalanceError) return reply.code(409).send({ error: 'the balance, less what open requests hold, does not cover this deduction' });
    if (err instanceof OperatorError) return reply.code(err.status).send({ error: err.message });
    if (err instanceof StoreConflictError) return reply.code(409).send({ error: 'conflict' });
    if (err instanceof StoreUnavailableError) return reply.code(503).send({ error: 'store unavailable' });
    const status = (err as { statusCode?: number }).statusCode;
    if (status && status < 500) return reply.code(status).send({ error: 'bad request' });
    deps.log.error({ err: (err as Error).name }, 'admin request failed');
    return reply.code(500).send({ error: 'internal error' });
  });
  return app;
}
