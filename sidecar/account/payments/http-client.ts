import { PaymentUnavailableError } from './provider.js';

/**
 * The one HTTP client the account service uses to reach its payment provider.
 * Outbound TLS settings (CA bundle, minimum version, client certificate) are to
 * be wired here and nowhere else.
 */
export interface PaymentHttpReply {
  readonly status: number;
  readonly body: unknown;
}

export interface PaymentHttp {
  request(method: 'GET' | 'POST', path: string, body?: unknown, headers?: Record<string, string>): Promise<PaymentHttpReply>;
}

export function createPaymentHttp(baseUrl: string, timeoutMs = 10_000): PaymentHttp {
  const base = baseUrl.replace(/\/$/, '');
  return {
    async request(method, path, body, headers = {}) {
      let res: Response;
      try {
        res = await fetch(`${base}${path}`, {
          method,
          headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(timeoutMs),
          redirect: 'error',
        });
      } catch (err) {
        throw new PaymentUnavailableError(err);
      }
      let parsed: unknown = null;
      try {
        parsed = await res.json();
      } catch {
        parsed = null;
      }
      return { status: res.status, body: parsed };
    },
  };
}
