import type { Catalog, ModelKind, ResolvedAlias } from './catalog.js';
import { Errors, gatewayError, type GatewayError } from './errors.js';

/**
 * Resolves the `model` field of a request body against the catalogue.
 * Unknown aliases and internal model names get the same answer, listing the
 * valid aliases for this endpoint, so the refusal confirms no internal name.
 */
export function resolveModelField(
  catalog: Catalog,
  model: unknown,
  kind: ModelKind,
): { ok: true; resolved: ResolvedAlias } | { ok: false; error: GatewayError } {
  if (typeof model !== 'string' || model.length === 0) {
    return { ok: false, error: gatewayError(Errors.invalidRequest, { message: 'The field is required and must be a string.', param: 'model' }) };
  }
  const resolved = catalog.resolve(model);
  if (!resolved) {
    const valid = catalog.validAliases(kind).join(', ');
    return { ok: false, error: gatewayError(Errors.unknownModel, { message: `Unknown model. Valid values: ${valid}.` }) };
  }
  if (resolved.kind !== kind) {
    const endpoint = kind === 'chat' ? '/chat/completions' : '/embeddings';
    const other = resolved.kind === 'chat' ? '/chat/completions' : '/embeddings';
    const valid = catalog.validAliases(kind).join(', ');
    return {
      ok: false,
      error: gatewayError(Errors.wrongEndpointForModel, {
        message: `This is ${resolved.kind === 'chat' ? 'a chat' : 'an embedding'} model; send it to ${other}. Models for ${endpoint}: ${valid}.`,
      }),
    };
  }
  return { ok: true, resolved };
}
