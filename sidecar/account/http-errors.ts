import type { FastifyReply, FastifyRequest } from 'fastify';
import type { z } from 'zod';
import { AccountErrors, envelope, gatewayError, type ErrorEntry } from '../src/domain/errors.js';

/**
 * How the account service answers when something is wrong: the envelope with
 * a status-class code for every error, except a body that fails validation,
 * which gets the web framework's `detail` array (status 422) the platform's
 * earlier framework answered, plus the request id.
 */
export class AccountError extends Error {
  constructor(readonly entry: ErrorEntry) {
    super(entry.message);
    this.name = 'AccountError';
  }
}

export const requestIdOf = (req: FastifyRequest): string => {
  const v = req.headers['x-request-id'];
  return typeof v === 'string' ? v : '';
};

export function sendError(req: FastifyRequest, reply: FastifyReply, entry: ErrorEntry): FastifyReply {
  return reply.code(entry.status).type('application/json').send(JSON.stringify(envelope(gatewayError(entry), requestIdOf(req))));
}

/** One validation problem, in the earlier framework's shape. */
export interface Detail {
  readonly loc: (string | number)[];
  readonly msg: string;
  readonly type: string;
}

export class ValidationFailed extends Error {
  constructor(readonly detail: Detail[]) {
    super('validation failed');
    this.name = 'ValidationFailed';
  }
}

export function sendValidation(req: FastifyRequest, reply: FastifyReply, detail: Detail[]): FastifyReply {
  return reply.code(422).type('application/json').send(JSON.stringify({ detail, request_id: requestIdOf(req) }));
}

/**
 * zod issues → `{loc, msg, type}`. Messages are fixed per kind of problem and
 * never repeat the caller's value.
 */
export function toDetail(where: 'body' | 'query' | 'path', issues: readonly z.core.$ZodIssue[]): Detail[] {
  const out: Detail[] = [];
  for (const i of issues) {
    const loc = [where, ...i.path.map((p) => (typeof p === 'symbol' ? String(p) : p))];
    if (i.code === 'unrecognized_keys') {
      for (const key of i.keys) out.push({ loc: [...loc, key], msg: 'Extra inputs are not permitted', type: 'extra_forbidden' });
      continue;
    }
    out.push({ loc, ...describe(i) });
  }
  return out;
}

function describe(i: z.core.$ZodIssue): { msg: string; type: string } {
  switch (i.code) {
    case 'invalid_type':
      if (i.input === undefined) return { msg: 'Field required', type: 'missing' };
      return { msg: `Input should be a valid ${i.expected}`, type: `${i.expected}_type` };
    case 'too_small':
      return i.origin === 'string' || i.origin === 'array'
        ? { msg: `Should have at least ${String(i.minimum)} ${i.origin === 'string' ? 'characters' : 'items'}`, type: i.origin === 'string' ? 'string_too_short' : 'too_short' }
        : { msg: `Input should be greater than or equal to ${String(i.minimum)}`, type: 'greater_than_equal' };
    case 'too_big':
      return i.origin === 'string' || i.origin === 'array'
        ? { msg: `Should have at most ${String(i.maximum)} ${i.origin === 'string' ? 'characters' : 'items'}`, type: i.origin === 'string' ? 'string_too_long' : 'too_long' }
        : { msg: `Input should be less than or equal to ${String(i.maximum)}`, type: 'less_than_equal' };
    case 'invalid_value':
      return { msg: `Input should be ${i.values.map((v) => `'${String(v)}'`).join(', ')}`, type: 'enum' };
    case 'invalid_format':
      return { msg: `Input should match the ${i.format} format`, type: 'string_pattern_mismatch' };
    case 'not_multiple_of':
      return { msg: `Input should be a multiple of ${String(i.divisor)}`, type: 'multiple_of' };
    case 'invalid_union':
      return { msg: 'Input does not match any allowed form', type: 'union_error' };
    default:
      return { msg: i.message && !('input' in i) ? i.message : 'Value error', type: 'value_error' };
  }
}

/** The parsed value, or a ValidationFailed carrying every problem. */
export function parseWith<S extends z.ZodType>(schema: S, where: 'body' | 'query' | 'path', value: unknown): z.infer<S> {
  const r = schema.safeParse(value, { reportInput: true });
  if (!r.success) throw new ValidationFailed(toDetail(where, r.error.issues));
  return r.data;
}

export { AccountErrors };
