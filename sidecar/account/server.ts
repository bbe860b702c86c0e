import Fastify, { type FastifyError, type FastifyInstance } from 'fastify';
import { Errors } from '../src/domain/errors.js';
import { StoreUnavailableError } from '../src/store/contract.js';
import { API_PREFIX } from '../src/api-prefix.js';
import type { AccountDeps } from './deps.js';
import { AccountError, AccountErrors, requestIdOf, sendError, sendValidation, ValidationFailed } from './http-errors.js';
import { accountRoutes } from './routes/accounts.js';
import { creditRoutes } from './routes/credits.js';
import { KNOWN_PATHS } from './paths.js';
import { openApiText } from './openapi.js';

/**
 * The account service: /v1/accounts* (the caller, members and roles, keys)
 * and /v1/credits* (balance, tiers, transactions, top-ups, auto top-up, spend
 * cap). Envoy has authenticated the caller with the gateway's rules and passes
 * the identity as headers (client copies removed first). With billing off on
 * the deployment every /credits* request, whatever its method or body, is the
 * 404 "billing is not enabled" (spec: endpoint rule 11).
 *
 * Request bodies: application/json only (415 otherwise), at most
 * limits.maxRequestBytes (413), JSON that parses (400 invalid_json); all three
 * in the envelope with code VAL_001. A body that parses but fails its schema
 * is the 422 `detail` array.
 */
export function buildAccountService(deps: AccountDeps): FastifyInstance {
  const app = Fastify({ logger: false, bodyLimit: deps.cfg.limits.maxRequestBytes, return503OnClosing: false });
  const billingEnabled = deps.cfg.accountService.billingEnabled;

  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
    const text = String(body);
    if (text.trim() === '') return done(null, undefined);
    try {
      done(null, JSON.parse(text));
    } catch {
      done(new AccountError(AccountErrors.invalidJson), undefined);
    }
  });

  app.get('/healthz', async () => ({ status: 'ok' }));
  const openapi = openApiText(deps.cfg.brand);
  app.get(`${API_PREFIX}/openapi.json`, async (_req, reply) => reply.type('application/json').send(openapi));

  app.addHook('onRequest', async (req, reply) => {
    const path = req.url.split('?', 1)[0] ?? '';
    if (!billingEnabled && (path === `${API_PREFIX}/credits` || path.startsWith(`${API_PREFIX}/credits/`))) {
      return sendError(req, reply, Errors.billingNotEnabled);
    }
  });

  // One line per request (the route's template, never a body, a key or a card token).
  app.addHook('onResponse', async (req, reply) => {
    deps.log.info(
      { request_id: requestIdOf(req), method: req.method, route: req.routeOptions.url ?? 'unknown', status: reply.statusCode, tenant_id: req.headers[`x-${deps.cfg.brand}-tenant-id`] },
      'account request',
    );
  });

  accountRoutes(app, deps);
  if (billingEnabled) creditRoutes(app, deps);

  app.setNotFoundHandler((req, reply) => {
    const path = req.url.split('?', 1)[0] ?? '';
    const known = KNOWN_PATHS.find((p) => p.pattern.test(path));
    return sendError(req, reply, known ? AccountErrors.methodNotAllowed : AccountErrors.notFound);
  });

  app.setErrorHandler((err: FastifyError | Error, req, reply) => {
    if (err instanceof AccountError) return sendError(req, reply, err.entry);
    if (err instanceof ValidationFailed) return sendValidation(req, reply, err.detail);
    if (err instanceof StoreUnavailableError) {
      deps.log.warn({ request_id: requestIdOf(req), path: req.routeOptions.url }, 'account store unavailable');
      return sendError(req, reply, AccountErrors.storeUnavailable);
    }
    const code = (err as FastifyError).code;
    if (code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') return sendError(req, reply, AccountErrors.unsupportedMediaType);
    if (code === 'FST_ERR_CTP_BODY_TOO_LARGE') return sendError(req, reply, AccountErrors.requestTooLarge);
    if (code === 'FST_ERR_CTP_INVALID_CONTENT_LENGTH' || code === 'FST_ERR_CTP_EMPTY_JSON_BODY') return sendError(req, reply, AccountErrors.invalidJson);
    deps.log.error({ request_id: requestIdOf(req), path: req.routeOptions.url, err: err.name, code }, 'account request failed');
    return sendError(req, reply, AccountErrors.internal);
  });
  return app;
}
