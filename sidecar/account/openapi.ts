import { z } from 'zod';
import { API_PREFIX } from '../src/api-prefix.js';
import { ChatRequest, EmbeddingsRequest, UsageQuery } from '../src/api/gateway-schemas.js';
import { AccountErrors, Errors } from '../src/domain/errors.js';
import { AddMemberBody, AutoTopupBody, ChangeRoleBody, CreateKeyBody, SpendCapBody, TopupBody, TransactionsQuery } from './schemas.js';

/**
 * The OpenAPI 3.1 document of the whole /v1 surface, generated from the zod
 * schemas that validate requests (z.toJSONSchema). Committed as
 * docs/openapi.json (test/unit/openapi.test.ts fails when it drifts or is not
 * valid OpenAPI 3.1) and served at GET /v1/openapi.json.
 */
type Schema = z.ZodType;
interface Op {
  readonly summary: string;
  readonly auth: 'key' | 'account' | 'none';
  readonly body?: Schema;
  readonly query?: Schema;
  readonly params?: readonly string[];
  readonly ok: number;
  readonly errors: readonly number[];
  readonly description?: string;
}

const json = (s: Schema) => z.toJSONSchema(s, { target: 'draft-2020-12', io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;

const SESSION_ONLY = "Session only: a key gets 403 AUTHZ_001 'session_required'.";
const OWNER_ADMIN = "Owners and admins only (a key acts as its person): others get 403 AUTHZ_001 'owner_required'.";

const OPS: Record<string, Record<string, Op>> = {
  '/models': { get: { summary: 'List the aliases', auth: 'key', ok: 200, errors: [401, 403] } },
  '/models/{model}': { get: { summary: 'One alias', auth: 'key', params: ['model'], ok: 200, errors: [401, 403, 404] } },
  '/chat/completions': { post: { summary: 'Chat completion (stream: true for server-sent events)', auth: 'key', body: ChatRequest, ok: 200, errors: [400, 401, 402, 403, 413, 429, 502, 503] } },
  '/embeddings': { post: { summary: 'Embeddings (one billed request per input string)', auth: 'key', body: EmbeddingsRequest, ok: 200, errors: [400, 401, 402, 403, 413, 429, 502, 503] } },
  '/usage': { get: { summary: 'Balance, period spend and usage by day and alias', auth: 'key', query: UsageQuery, ok: 200, errors: [400, 401, 403, 503] } },
  '/whoami': { get: { summary: 'The identity the gateway resolved', auth: 'key', ok: 200, errors: [401, 403] } },
  '/accounts/me': { get: { summary: 'The caller: workspace, person, role, credential', auth: 'account', ok: 200, errors: [401, 403] } },
  '/accounts/members': {
    get: { summary: "The workspace's members and roles", auth: 'account', ok: 200, errors: [401, 403] },
    post: { summary: 'Add a member', description: `${SESSION_ONLY} ${OWNER_ADMIN} Only an owner adds an owner.`, auth: 'account', body: AddMemberBody, ok: 201, errors: [400, 401, 403, 409, 415, 422] },
  },
  '/accounts/members/{person_id}': {
    patch: { summary: "Change a member's role", description: `${SESSION_ONLY} ${OWNER_ADMIN} Only an owner grants or takes the owner role; the last owner stays.`, auth: 'account', params: ['person_id'], body: ChangeRoleBody, ok: 200, errors: [400, 401, 403, 404, 409, 415, 422] },
    delete: { summary: 'Remove a member (anyone may remove themselves)', description: `${SESSION_ONLY} ${OWNER_ADMIN} The last owner stays.`, auth: 'account', params: ['person_id'], ok: 200, errors: [401, 403, 404, 409] },
  },
  '/accounts/keys': {
    get: { summary: "The workspace's keys (prefix and last four characters only)", auth: 'account', ok: 200, errors: [401, 403] },
    post: { summary: 'Issue a key (returned once; only its SHA-256 is stored)', description: SESSION_ONLY, auth: 'account', body: CreateKeyBody, ok: 201, errors: [400, 401, 403, 415, 422] },
  },
  '/accounts/keys/{key_id}': {
    delete: { summary: 'Revoke a key (refused by every gateway instance at once)', description: `${SESSION_ONLY} A member revokes their own keys; owners and admins any key.`, auth: 'account', params: ['key_id'], ok: 200, errors: [401, 403, 404] },
  },
  '/credits': { get: { summary: 'Balance, held, available, spend cap, period spend, auto top-up, saved card', auth: 'account', ok: 200, errors: [401, 403, 404] } },
  '/credits/tiers': { get: { summary: 'Credit tiers on offer', auth: 'account', ok: 200, errors: [401, 403, 404] } },
  '/credits/transactions': { get: { summary: 'Money movements, newest first, cursor pagination', auth: 'account', query: TransactionsQuery, ok: 200, errors: [400, 401, 403, 404, 422] } },
  '/credits/topup': {
    post: {
      summary: 'Buy credits (a tier or an amount)',
      description: `${OWNER_ADMIN} save_card: true is session only. Send an Idempotency-Key header: a resend returns the first result and credits once.`,
      auth: 'account',
      body: TopupBody,
      ok: 201,
      errors: [400, 401, 402, 403, 404, 409, 415, 422, 503],
    },
  },
  '/credits/auto-topup': {
    put: { summary: 'Set auto top-up (threshold and tier or amount)', description: `${SESSION_ONLY} ${OWNER_ADMIN}`, auth: 'account', body: AutoTopupBody, ok: 200, errors: [400, 401, 403, 404, 409, 415, 422] },
    delete: { summary: 'Switch auto top-up off', description: `${SESSION_ONLY} ${OWNER_ADMIN}`, auth: 'account', ok: 200, errors: [401, 403, 404] },
  },
  '/credits/spend-cap': {
    get: { summary: 'The monthly spend cap and this period’s spend', auth: 'account', ok: 200, errors: [401, 403, 404] },
    put: { summary: 'Set or clear the monthly spend cap', description: OWNER_ADMIN, auth: 'account', body: SpendCapBody, ok: 200, errors: [400, 401, 403, 404, 415, 422] },
  },
};

/** Which tokens come with each status on the account paths (for the response descriptions). */
function accountTokens(status: number): string {
  const tokens = Object.values(AccountErrors)
    .filter((e) => e.status === status)
    .map((e) => `${e.code} ${/'error': '([a-z_]+)'/.exec(e.message)?.[1] ?? ''}`);
  return [...new Set(tokens)].join(', ');
}

const gatewayCodes = (status: number) => [...new Set(Object.values(Errors).filter((e) => e.status === status).map((e) => e.code ?? 'null'))].join(', ');

export function buildOpenApi(brand = 'svc'): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const [path, methods] of Object.entries(OPS)) {
    const item: Record<string, unknown> = {};
    for (const [method, op] of Object.entries(methods)) {
      const account = op.auth === 'account';
      const parameters: unknown[] = (op.params ?? []).map((name) => ({ name, in: 'path', required: true, schema: { type: 'string' } }));
      if (op.query) {
        const q = json(op.query) as { properties?: Record<string, unknown>; required?: string[] };
        for (const [name, schema] of Object.entries(q.properties ?? {})) parameters.push({ name, in: 'query', required: (q.required ?? []).includes(name), schema });
      }
      if (account) parameters.push({ name: 'X-Workspace-ID', in: 'header', required: false, description: 'The workspace, when a session names several', schema: { type: 'string' } });
      if (path === '/credits/topup') parameters.push({ name: 'Idempotency-Key', in: 'header', required: false, schema: { type: 'string', maxLength: 200 } });
      const responses: Record<string, unknown> = {
        [String(op.ok)]: { description: 'Success', content: { 'application/json': { schema: { type: 'object' } } } },
      };
      for (const status of op.errors) {
        if (status === 422) {
          responses['422'] = { description: 'The body or query failed validation', content: { 'application/json': { schema: { $ref: '#/components/schemas/ValidationError' } } } };
          continue;
        }
        const codes = account ? accountTokens(status) || gatewayCodes(status) : gatewayCodes(status);
        const extra = account && status === 404 && path.startsWith('/credits') ? ' (404 with code null: billing is not enabled on this deployment)' : '';
        responses[String(status)] = { description: `Error envelope; code and token: ${codes || 'see the README'}${extra}`, content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorEnvelope' } } } };
      }
      item[method] = {
        operationId: `${method}${path.replace(/[{}]/g, '').replace(/[/-](\w)/g, (_m, c: string) => c.toUpperCase())}`,
        summary: op.summary,
        ...(op.description ? { description: op.description } : {}),
        tags: [account ? 'account' : 'gateway'],
        ...(parameters.length ? { parameters } : {}),
        ...(op.body ? { requestBody: { required: true, content: { 'application/json': { schema: json(op.body) } } } } : {}),
        responses,
        security: account ? [{ apiKey: [] }, { session: [] }] : [{ apiKey: [] }, { keyBearer: [] }],
      };
    }
    paths[`${API_PREFIX}${path}`] = item;
  }
  return {
    openapi: '3.1.0',
    info: { title: `${brand} inference gateway`, version: '2026-11', description: 'OpenAI-compatible inference gateway and its account service. Amounts are integer micro-units of the deployment currency.' },
    paths,
    components: {
      securitySchemes: {
        apiKey: { type: 'apiKey', in: 'header', name: 'X-API-Key' },
        keyBearer: { type: 'http', scheme: 'bearer', description: 'The key as a bearer: inference paths only' },
        session: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'Platform session: /credits* and /accounts* only' },
      },
      schemas: {
        ErrorEnvelope: {
          type: 'object',
          required: ['error'],
          properties: {
            error: {
              type: 'object',
              required: ['message', 'type', 'param', 'code', 'request_id'],
              properties: {
                message: { type: 'string', description: "On the account paths the machine token is inside: {'error': '<token>'}" },
                type: { type: 'string' },
                param: { type: ['string', 'null'] },
                code: { type: ['string', 'null'] },
                request_id: { type: 'string' },
              },
            },
          },
        },
        ValidationError: {
          type: 'object',
          required: ['detail', 'request_id'],
          properties: {
            detail: {
              type: 'array',
              items: {
                type: 'object',
                required: ['loc', 'msg', 'type'],
                properties: { loc: { type: 'array', items: { type: ['string', 'integer'] } }, msg: { type: 'string' }, type: { type: 'string' } },
              },
            },
            request_id: { type: 'string' },
          },
        },
      },
    },
  };
}

/** The committed document's text. */
export const openApiText = (brand = 'svc'): string => `${JSON.stringify(buildOpenApi(brand), null, 2)}\n`;
