/**
 * An OpenAI-compatible upstream simulator: the stand-in model provider the
 * gateway forwards to in local runs, tests and benchmarks.
 *
 *   const sim = createSimulator({ latencyMs: 0 });
 *   const { port } = await sim.listen(0, '127.0.0.1');
 *   ...
 *   await sim.close();
 */
import Fastify, { type FastifyError, type FastifyInstance } from 'fastify';
import { controlRoutes } from './control.js';
import { EmbeddingCache } from './embeddings.js';
import { invalidRequest } from './errors.js';
import type { SecureContextOptions, Server as TlsServer, TLSSocket } from 'node:tls';
import { initialConfig, resolveOptions, type ResolvedOptions, type RuntimeConfig, type SimulatorOptions, type SimulatorTls } from './options.js';
import { sendError } from './respond.js';
import { v1Routes } from './routes.js';
import { SimulatorStats } from './stats.js';

export type { SimulatorOptions, RuntimeConfig, SimulatorTls } from './options.js';
export type { StatsSnapshot, RecordedRequest, Cancellation, TlsStats } from './stats.js';
export { SimulatorStats } from './stats.js';

export interface Simulator {
  readonly app: FastifyInstance;
  listen(port?: number, host?: string): Promise<{ port: number }>;
  close(): Promise<void>;
  readonly stats: SimulatorStats;
  /** Live runtime config (what POST /_sim/config changes). */
  readonly config: RuntimeConfig;
  readonly options: ResolvedOptions;
}

const BODY_LIMIT = 64 * 1024 * 1024;
const BAD_JSON =
  "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. " +
  'The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)';

function errorResponse(err: FastifyError): { status: number; message: string } {
  const status = typeof err.statusCode === 'number' && err.statusCode >= 400 ? err.statusCode : 500;
  if (err instanceof SyntaxError || err.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || err.code === 'FST_ERR_CTP_EMPTY_JSON_BODY') {
    return { status: 400, message: BAD_JSON };
  }
  return { status, message: status >= 500 ? 'The server had an error while processing your request.' : err.message };
}

function httpsOptions(tls: SimulatorTls): SecureContextOptions & { requestCert: boolean; rejectUnauthorized: boolean } {
  const mutual = tls.clientCa != null;
  return {
    cert: tls.cert,
    key: tls.key,
    ...(mutual ? { ca: tls.clientCa! } : {}),
    ...(tls.maxVersion ? { maxVersion: tls.maxVersion } : {}),
    requestCert: mutual,
    rejectUnauthorized: mutual,
  };
}

/** Connections, handshakes (completed or refused) and SNI names, for tests that prove nothing was sent. */
function countTls(server: TlsServer, stats: SimulatorStats): void {
  server.on('connection', () => stats.tlsConnection());
  server.on('secureConnection', (socket: TLSSocket) => stats.tlsHandshake(socket.servername, true, socket.getProtocol()));
  server.on('tlsClientError', (_err: Error, socket: TLSSocket) => stats.tlsHandshake(socket.servername, false));
}

export function createSimulator(opts: SimulatorOptions = {}): Simulator {
  const options = resolveOptions(opts);
  const config = initialConfig(opts);
  const stats = new SimulatorStats();
  const cache = new EmbeddingCache(options.dims);

  const tls = opts.tls ?? null;
  // The https server type differs from the http one only in the server object; routes are the same.
  const app = Fastify({
    logger: options.logger,
    bodyLimit: BODY_LIMIT,
    forceCloseConnections: true,
    return503OnClosing: false,
    ...(tls ? { https: httpsOptions(tls) } : {}),
  }) as unknown as FastifyInstance;
  if (tls) countTls(app.server as unknown as TlsServer, stats);

  // Like vendors, parse a JSON body whatever content-type it came with.
  app.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => {
    const text = typeof body === 'string' ? body : body.toString('utf8');
    try {
      done(null, text === '' ? undefined : JSON.parse(text));
    } catch {
      done(Object.assign(new SyntaxError('invalid JSON'), { statusCode: 400 }), undefined);
    }
  });

  app.setErrorHandler((err: FastifyError, _request, reply) => {
    const { status, message } = errorResponse(err);
    const error = status >= 500 ? { message, type: 'server_error', param: null, code: null } : invalidRequest(message);
    sendError(reply, status, error);
  });

  controlRoutes(app, stats, config);
  app.register(v1Routes({ options, config, stats, cache }), { prefix: '/v1' });
  app.setNotFoundHandler((request, reply) => {
    sendError(reply, 404, invalidRequest(`Invalid URL (${request.method} ${request.url})`));
  });

  return {
    app,
    stats,
    config,
    options,
    async listen(port = 0, host = '127.0.0.1') {
      await app.listen({ port, host });
      const address = app.server.address();
      if (address === null || typeof address === 'string') throw new Error('simulator: no TCP address');
      return { port: address.port };
    },
    async close() {
      await app.close();
    },
  };
}
