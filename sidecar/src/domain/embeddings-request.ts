import type { Catalog } from './catalog.js';
import { Errors, gatewayError } from './errors.js';
import { resolveModelField } from './model-field.js';
import type { Admission } from './request-context.js';
import { estimateTokens } from './token-estimate.js';
import { upstreamBody, type RawBody } from './upstream-body.js';

import { isObject } from '../util/json.js';

/** The service's vectors always have this many numbers (the spec's limits); there is no other size. */
export const EMBEDDING_DIMENSIONS = 3584;

/** Validates an embeddings body; one billed request per input string. */
export function admitEmbeddings(body: unknown, catalog: Catalog, maxInputs: number, raw?: RawBody): Admission {
  if (!isObject(body)) {
    return { ok: false, error: gatewayError(Errors.invalidRequest, { param: 'body', message: 'The request body must be a JSON object.' }) };
  }
  const model = resolveModelField(catalog, body.model, 'embedding');
  if (!model.ok) return model;
  const input = body.input;
  let count: number;
  if (typeof input === 'string') {
    if (input.length === 0) return { ok: false, error: gatewayError(Errors.emptyInput) };
    count = 1;
  } else if (Array.isArray(input)) {
    if (input.length === 0 || input.some((s) => s === '')) return { ok: false, error: gatewayError(Errors.emptyInput) };
    if (!input.every((s) => typeof s === 'string')) {
      return { ok: false, error: gatewayError(Errors.invalidRequest, { param: 'input', message: 'The field must be a string or an array of strings.' }) };
    }
    if (input.length > maxInputs) {
      return { ok: false, error: gatewayError(Errors.invalidRequest, { param: 'input', message: `At most ${maxInputs} input strings per request.` }) };
    }
    count = input.length;
  } else if (input == null) {
    return { ok: false, error: gatewayError(Errors.emptyInput) };
  } else {
    return { ok: false, error: gatewayError(Errors.invalidRequest, { param: 'input', message: 'The field must be a string or an array of strings.' }) };
  }
  if (body.encoding_format != null && body.encoding_format !== 'float' && body.encoding_format !== 'base64') {
    return { ok: false, error: gatewayError(Errors.invalidRequest, { param: 'encoding_format', message: 'The field must be float or base64.' }) };
  }
  // `dimensions` may only restate the one size there is; it is never sent up (a provider may truncate to it).
  if (body.dimensions != null && body.dimensions !== EMBEDDING_DIMENSIONS) {
    return {
      ok: false,
      error: gatewayError(Errors.invalidRequest, { param: 'dimensions', message: `Vectors always have ${EMBEDDING_DIMENSIONS} numbers; omit dimensions.` }),
    };
  }
  const { dimensions: _restated, ...fields } = body;
  const upstream = { ...fields, model: model.resolved.internalModel };
  const sent = upstreamBody(upstream, ['input'], raw);
  return {
    ok: true,
    upstreamBody: sent.bytes,
    ctx: {
      endpoint: 'embeddings',
      resolved: model.resolved,
      stream: false,
      floor: null,
      requestCount: count,
      maxTokens: null,
      promptEstimate: estimateTokens(input),
      promptBytes: sent.memberBytes,
      messageCount: count,
    },
  };
}
