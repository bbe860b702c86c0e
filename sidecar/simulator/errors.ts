/**
 * OpenAI-style error bodies: `{"error":{"message","type","param","code"}}`,
 * with the messages and codes real vendors use for each status.
 */

export interface OpenAIError {
  readonly message: string;
  readonly type: string;
  readonly param: string | null;
  readonly code: string | null;
}

/** The context window the simulated models claim in overflow errors. */
export const CONTEXT_WINDOW = 8192;

export function errorBody(e: OpenAIError): string {
  return JSON.stringify({ error: e });
}

export function invalidRequest(message: string, param: string | null = null, code: string | null = null): OpenAIError {
  return { message, type: 'invalid_request_error', param, code };
}

export function contextOverflow(model: string, promptTokens: number): OpenAIError {
  const requested = Math.max(promptTokens, CONTEXT_WINDOW + 1);
  return invalidRequest(
    `This model's maximum context length is ${CONTEXT_WINDOW} tokens for model '${model}'. ` +
      `However, your messages resulted in ${requested} tokens. Please reduce the length of the messages.`,
    'messages',
    'context_length_exceeded',
  );
}

/** The error a vendor would answer with for `status` on `model`. */
export function errorForStatus(status: number, model: string, promptTokens: number): OpenAIError {
  switch (status) {
    case 400: return contextOverflow(model, promptTokens);
    case 401: return invalidRequest('Incorrect API key provided.', null, 'invalid_api_key');
    case 403: return { message: 'You are not allowed to use this model.', type: 'permission_error', param: null, code: null };
    case 404: return invalidRequest(`The model '${model}' does not exist or you do not have access to it.`, 'model', 'model_not_found');
    case 408: return { message: 'Request timed out.', type: 'timeout_error', param: null, code: 'timeout' };
    case 429: return { message: `Rate limit reached for ${model}. Please try again later.`, type: 'requests', param: null, code: 'rate_limit_exceeded' };
    case 500: return { message: 'The server had an error while processing your request. Sorry about that!', type: 'server_error', param: null, code: null };
    case 502: return { message: 'Bad gateway.', type: 'server_error', param: null, code: null };
    case 503: return { message: 'The engine is currently overloaded, please try again later.', type: 'server_error', param: null, code: 'service_unavailable' };
    case 504: return { message: 'Gateway timeout.', type: 'server_error', param: null, code: 'timeout' };
    default:
      return status >= 500
        ? { message: `Upstream error (${status}).`, type: 'server_error', param: null, code: null }
        : invalidRequest(`Request failed (${status}).`);
  }
}

/** Body of a streamed error event (midstream-error-event). */
export const STREAM_ERROR_EVENT =
  'data: ' +
  errorBody({ message: 'The server had an error while processing your request.', type: 'server_error', param: null, code: 'internal_error' }) +
  '\n\n';

/** What the garbage directive answers with status 200: not JSON (cut-off JSON after noise). */
export const GARBAGE_BODY = 'sim garbage: this body is not JSON {"id":"chatcmpl-x","choices":[{"index":0,"mess';
