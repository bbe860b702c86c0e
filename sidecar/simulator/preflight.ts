/**
 * What happens before a /v1 answer is generated: the configured latency (or
 * delay directive), then the failure directives and the forced status.
 * Returns true when the request has been dealt with.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Directives } from './directives.js';
import { GARBAGE_BODY, errorForStatus } from './errors.js';
import type { RuntimeConfig } from './options.js';
import { sendError, sendJson } from './respond.js';

export async function preflight(
  request: FastifyRequest,
  reply: FastifyReply,
  d: Readonly<Directives>,
  config: RuntimeConfig,
  model: string,
  promptTokens: number,
): Promise<boolean> {
  const delay = d.delayMs ?? config.latencyMs;
  if (delay > 0) await sleep(delay);
  if (d.reset) {
    reply.hijack();
    request.raw.socket.destroy();
    return true;
  }
  const status = d.contextOverflow ? 400 : (d.status ?? config.forceStatus);
  if (status !== null) {
    if (d.retryAfter !== undefined) reply.header('retry-after', String(d.retryAfter));
    sendError(reply, status, errorForStatus(status, model, promptTokens));
    return true;
  }
  if (d.empty) {
    sendJson(reply, '');
    return true;
  }
  if (d.garbage) {
    sendJson(reply, GARBAGE_BODY);
    return true;
  }
  return false;
}
