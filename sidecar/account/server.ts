import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { Errors, envelope, gatewayError, type ErrorEntry } from '../src/domain/errors.js';

/**
 * The account service behind the same Envoy: /v1/credits* and /v1/accounts*.
 * Envoy has already authenticated the caller and set the identity headers.
 * With billing disabled on a deployment, /credits* answers 404 "billing not
 * enabled" in the gateway's envelope (spec: endpoint rule 11).
 */
export interface AccountServiceOptions {
  readonly billingEnabled: boolean;
  readonly brand: string;
}

export function buildAccountService(opts: AccountServiceOptions): FastifyInstance {
  const app = Fastify({ logger: false, bodyLimit: 64 * 1024 });
  const send = (entry: ErrorEntry, requestId: string) => JSON.stringify(envelope(gatewayError(entry), requestId));

  app.get('/healthz', async () => ({ status: 'ok' }));

  const credits = async (req: FastifyRequest, reply: FastifyReply) =>
    reply.code(404).type('application/json').send(send(opts.billingEnabled ? Errors.notFound : Errors.billingNotEnabled, rid(req.headers)));
  app.all('/v1/credits', credits);
  app.all('/v1/credits/*', credits);
  // Who the gateway says is calling (identity headers set by Envoy's ext_authz; client copies are removed first).
  app.get('/v1/accounts/me', async (req, reply) => {
    const h = (name: string) => {
      const v = req.headers[`x-${opts.brand}-${name}`];
      return typeof v === 'string' && v ? v : null;
    };
    const tenant = h('tenant-id');
    if (!tenant) return reply.code(404).type('application/json').send(send(Errors.notFound, rid(req.headers)));
    return {
      object: 'account',
      tenant_id: tenant,
      subject_id: h('subject-id'),
      auth_method: h('auth-method'),
      role: h('role'),
      scopes: h('scopes')?.split(' ') ?? [],
    };
  });
  app.all('/v1/accounts', async (req, reply) => reply.code(404).type('application/json').send(send(Errors.notFound, rid(req.headers))));
  app.all('/v1/accounts/*', async (req, reply) => reply.code(404).type('application/json').send(send(Errors.notFound, rid(req.headers))));
  app.setNotFoundHandler((req, reply) => reply.code(404).type('application/json').send(send(Errors.notFound, rid(req.headers))));
  return app;
}

const rid = (headers: Record<string, string | string[] | undefined>): string => {
  const v = headers['x-request-id'];
  return typeof v === 'string' ? v : '';
};
