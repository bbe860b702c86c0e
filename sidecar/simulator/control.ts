/**
 * Test-control routes outside /v1 (never behind the API key, never recorded):
 * GET /_sim/stats, POST /_sim/reset, GET|POST /_sim/config, GET /health.
 */
import type { FastifyInstance } from 'fastify';
import { type RuntimeConfig, updateConfig } from './options.js';
import type { SimulatorStats } from './stats.js';

export function controlRoutes(app: FastifyInstance, stats: SimulatorStats, config: RuntimeConfig): void {
  app.get('/_sim/stats', async () => stats.snapshot());

  app.post('/_sim/reset', async () => {
    stats.reset();
    return { ok: true };
  });

  app.get('/_sim/config', async () => config);

  app.post('/_sim/config', async (request, reply) => {
    const problem = updateConfig(config, request.body);
    if (problem !== null) return reply.code(400).send({ error: { message: problem, type: 'invalid_request_error', param: null, code: null } });
    return config;
  });

  app.get('/health', async (_request, reply) => reply.code(200).send());
}
