/** Small reply helpers shared by the routes. */
import type { FastifyReply } from 'fastify';
import { errorBody, type OpenAIError } from './errors.js';

export function sendJson(reply: FastifyReply, body: string, status = 200): FastifyReply {
  return reply.code(status).header('content-type', 'application/json').send(body);
}

export function sendError(reply: FastifyReply, status: number, error: OpenAIError): FastifyReply {
  return sendJson(reply, errorBody(error), status);
}

/** Path without the query string. */
export function pathOf(url: string): string {
  const q = url.indexOf('?');
  return q < 0 ? url : url.slice(0, q);
}
