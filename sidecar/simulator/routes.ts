/**
 * The OpenAI-compatible routes under /v1, with request recording and API-key
 * enforcement in one preHandler hook.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyInstance, FastifyPluginCallback } from 'fastify';
import { parseChat, planChat, renderChat, scanChat } from './chat.js';
import { streamChat } from './chat-stream.js';
import { DirectiveScanner, type Directives } from './directives.js';
import { EmbeddingCache, parseEmbeddings, scanEmbeddings } from './embeddings.js';
import { invalidRequest } from './errors.js';
import { nowSeconds } from './ids.js';
import type { ResolvedOptions, RuntimeConfig } from './options.js';
import { preflight } from './preflight.js';
import { pathOf, sendError, sendJson } from './respond.js';
import { sliceSettingsFor } from './slices.js';
import type { SimulatorStats } from './stats.js';

export interface RouteContext {
  readonly options: ResolvedOptions;
  readonly config: RuntimeConfig;
  readonly stats: SimulatorStats;
  readonly cache: EmbeddingCache;
}

function modelJson(id: string, created: number): string {
  return `{"id":${JSON.stringify(id)},"object":"model","created":${created},"owned_by":"simulator"}`;
}

function authProblem(header: string | undefined, key: string): string | null {
  if (header === `Bearer ${key}`) return null;
  if (header === undefined || !/^bearer\s/i.test(header)) {
    return "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).";
  }
  const given = header.replace(/^bearer\s+/i, '').trim();
  if (given === key) return null;
  const masked = given.length > 8 ? `${given.slice(0, 3)}***${given.slice(-4)}` : '***';
  return `Incorrect API key provided: ${masked}.`;
}

export function v1Routes(ctx: RouteContext): FastifyPluginCallback {
  const { options, config, stats, cache } = ctx;
  const created = nowSeconds();
  let seeds = 0;
  const nextSeed = () => ++seeds;
  const modelsBody = `{"object":"list","data":[${options.models.map((m) => modelJson(m, created)).join(',')}]}`;

  return (v1: FastifyInstance, _opts, done) => {
    v1.addHook('preHandler', (request, reply, next) => {
      stats.record(request.method, pathOf(request.url), request.headers, request.body);
      if (options.apiKey !== null) {
        const problem = authProblem(request.headers.authorization, options.apiKey);
        if (problem !== null) {
          sendError(reply, 401, invalidRequest(problem, null, problem.startsWith('Incorrect') ? 'invalid_api_key' : null));
          return;
        }
      }
      next();
    });

    const headerOnly = (headers: IncomingHttpHeaders): Readonly<Directives> => {
      const s = new DirectiveScanner();
      s.header(headers['x-sim-directive']);
      return s.result();
    };

    v1.get('/models', async (request, reply) => {
      if (await preflight(request, reply, headerOnly(request.headers), config, '', 1)) return reply;
      return sendJson(reply, modelsBody);
    });

    v1.get<{ Params: { id: string } }>('/models/:id', async (request, reply) => {
      const id = request.params.id;
      if (await preflight(request, reply, headerOnly(request.headers), config, id, 1)) return reply;
      return sendJson(reply, modelJson(id, created));
    });

    v1.post('/chat/completions', async (request, reply) => {
      const req = parseChat(request.body);
      if ('error' in req) return sendError(reply, 400, req.error);
      const { promptTokens, directives } = scanChat(req, request.headers);
      if (await preflight(request, reply, directives, config, req.model, promptTokens)) return reply;
      const plan = planChat(req, promptTokens, directives, options);
      if ('error' in plan) return sendError(reply, 400, plan.error);
      if (!req.stream) return sendJson(reply, renderChat(plan, directives.noUsage !== true));
      reply.hijack();
      const settings = {
        includeUsage: req.includeUsage,
        chunkDelayMs: config.chunkDelayMs,
        path: pathOf(request.url),
        slices: sliceSettingsFor(directives, options.slices, nextSeed),
      };
      await streamChat(reply.raw, plan, directives, settings, stats).catch(() => reply.raw.destroy());
      return reply;
    });

    v1.post('/embeddings', async (request, reply) => {
      const req = parseEmbeddings(request.body);
      if ('error' in req) return sendError(reply, 400, req.error);
      const { promptTokens, directives } = scanEmbeddings(req, request.headers);
      if (await preflight(request, reply, directives, config, req.model, promptTokens)) return reply;
      return sendJson(reply, cache.render(req, promptTokens));
    });

    v1.setNotFoundHandler((request, reply) => {
      sendError(reply, 404, invalidRequest(`Invalid URL (${request.method} ${pathOf(request.url)})`));
    });

    done();
  };
}
