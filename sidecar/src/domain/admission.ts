import type { Catalog } from './catalog.js';
import { admitChat } from './chat-request.js';
import { admitEmbeddings } from './embeddings-request.js';
import { Errors, gatewayError } from './errors.js';
import type { Admission } from './request-context.js';
import { isObject, tryParseJson } from '../util/json.js';
import { pathOnly } from './auth/routes.js';
import { MAX_JSON_DEPTH, mayBePoisoned, poisonedField, scanBody } from './json-guard.js';
import { COPY_MIN_BYTES, type RawBody } from './upstream-body.js';

/** The endpoints whose body the gateway reads, by path under the prefix. */
export type BodyEndpoint = 'chat' | 'embeddings';

export function bodyEndpointOf(path: string, apiPrefix: string): BodyEndpoint | null {
  const p = pathOnly(path);
  if (p === `${apiPrefix}/chat/completions`) return 'chat';
  if (p === `${apiPrefix}/embeddings`) return 'embeddings';
  return null;
}

/**
 * The top-level fields a `__proto__` refusal may name in its `param`: the
 * poisoning keys themselves and OpenAI's request fields that hold objects.
 * Any other top-level key is the caller's own text (of any length), which an
 * error never echoes: the refusal then names `body`.
 */
const NAMEABLE_FIELDS: ReadonlySet<string> = new Set([
  '__proto__', 'constructor', 'messages', 'tools', 'tool_choice', 'functions', 'function_call', 'response_format',
  'stream_options', 'metadata', 'logit_bias', 'prediction', 'audio', 'modalities', 'web_search_options', 'stop', 'input',
]);

export interface AdmissionPolicy {
  readonly catalog: Catalog;
  readonly defaultTemperature: number;
  readonly maxEmbeddingInputs: number;
  readonly maxRequestBytes: number;
}

/**
 * Reads and validates a chat or embeddings request body and builds what goes
 * upstream. Pure and deterministic: ext_authz runs it to price the request,
 * ext_proc runs it again on the same bytes to rewrite them.
 */
export function admitBody(endpoint: BodyEndpoint, method: string, body: Buffer | null, policy: AdmissionPolicy): Admission {
  if (method !== 'POST') return { ok: false, error: gatewayError(Errors.methodNotAllowed) };
  if (!body || body.length === 0) {
    return { ok: false, error: gatewayError(Errors.invalidRequest, { param: 'body', message: 'A JSON request body is required.' }) };
  }
  if (body.length > policy.maxRequestBytes) return { ok: false, error: gatewayError(Errors.payloadTooLarge) };
  // Before parsing: everything after it (validation, re-serialising) may recurse.
  const scan = scanBody(body, MAX_JSON_DEPTH, { members: body.length >= COPY_MIN_BYTES });
  if (scan.tooDeep) {
    return { ok: false, error: gatewayError(Errors.invalidRequest, { param: 'body', message: `The request body nests deeper than ${MAX_JSON_DEPTH} levels.` }) };
  }
  const parsed = tryParseJson(body);
  if (parsed === undefined) {
    return { ok: false, error: gatewayError(Errors.invalidRequest, { param: 'body', message: 'The request body is not valid JSON.' }) };
  }
  // The walk over every object only when the bytes could spell such a key.
  const poisoned = mayBePoisoned(body) ? poisonedField(parsed) : null;
  if (poisoned !== null) {
    return {
      ok: false,
      error: gatewayError(Errors.invalidRequest, {
        param: NAMEABLE_FIELDS.has(poisoned) ? poisoned : 'body',
        message: 'A __proto__ key (or constructor.prototype) is not accepted in a request body.',
      }),
    };
  }
  // What goes up unchanged (the messages, an embeddings input) is sent as the caller's own bytes.
  const raw: RawBody | undefined = scan.members && isObject(parsed) ? { bytes: body, members: scan.members, parsed } : undefined;
  return endpoint === 'chat'
    ? admitChat(parsed, policy.catalog, { defaultTemperature: policy.defaultTemperature }, raw)
    : admitEmbeddings(parsed, policy.catalog, policy.maxEmbeddingInputs, raw);
}
