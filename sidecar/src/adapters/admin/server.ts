import { timingSafeEqual, createHash } from 'node:crypto';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { createTenant, issueKey, keyView, OperatorError, revokeKey } from '../../domain/operator.js';
import { StoreConflictError, StoreUnavailableError, type Store } from '../../store/contract.js';

/**
 * The sidecar's operator API: health, readiness and tenant/key management.
 * Bound to loopback by default and guarded by a bearer admin token compared
 * in constant time. Never reachable through Envoy's public listener.
 */
export interface AdminDeps {
  readonly store: Store;
  readonly brand: string;
  readonly adminToken: string;
  readonly log: Logger;
}

const digest = (s: string) => createHash('sha256').update(s).digest();

export function buildAdminServer(deps: AdminDeps): FastifyInstance {
  const app = Fastify({ logger: false, bodyLimit: 64 * 1024 });
  const expected = digest(`Bearer ${deps.adminToken}`);

  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_req, reply) => {
    try {
      await deps.store.ping();
      return { status: 'ready', store: deps.store.kind };
    } catch {
      return reply.code(503).send({ status: 'unavailable', store: deps.store.kind });
    }
  });

  app.register(async (admin) => {
    admin.addHook('onRequest', async (req, reply) => {
      const given = digest(req.headers.authorization ?? '');
      if (!timingSafeEqual(given, expected)) return reply.code(401).send({ error: 'admin token required' });
    });

    admin.post<{ Body: { name?: string } }>('/admin/tenants', async (req, reply) => {
      const t = await createTenant(deps.store, String(req.body?.name ?? ''));
      return reply.code(201).send({ id: t.id, name: t.name, created_at: t.createdAt });
    });
    admin.get('/admin/tenants', async () => {
      const list = await deps.store.listTenants();
      return { data: list.map((t) => ({ id: t.id, name: t.name, created_at: t.createdAt })) };
    });
    admin.post<{ Params: { id: string }; Body: { name?: string; scopes?: string[]; allowed_ips?: string[] | null } }>(
      '/admin/tenants/:id/keys',
      async (req, reply) => {
        const b = req.body ?? {};
        const { key, record } = await issueKey(deps.store, deps.brand, {
          tenantId: req.params.id,
          name: b.name,
          scopes: b.scopes,
          allowedIps: b.allowed_ips,
        });
        deps.log.info({ key_id: record.id, tenant_id: record.tenantId }, 'key issued');
        return reply.code(201).send({ key, ...keyView(record, deps.brand) });
      },
    );
    admin.get<{ Params: { id: string } }>('/admin/tenants/:id/keys', async (req) => {
      const keys = await deps.store.listKeys(req.params.id);
      return { data: keys.map((k) => keyView(k, deps.brand)) };
    });
    admin.post<{ Params: { id: string } }>('/admin/keys/:id/revoke', async (req) => {
      const k = await revokeKey(deps.store, req.params.id);
      deps.log.info({ key_id: k.id, tenant_id: k.tenantId }, 'key revoked');
      return keyView(k, deps.brand);
    });
  });

  app.setErrorHandler((err, _req, reply) => {
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
