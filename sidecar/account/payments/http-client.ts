import { httpExchange, keepAliveAgent, nodeTlsOptions, parseJsonBody } from '../../src/adapters/outbound-tls.js';
import type { OutboundTls } from '../../src/config/outbound-tls.js';
import { PaymentUnavailableError } from './provider.js';

/**
 * The one HTTP client the account service uses to reach its payment provider.
 * An https:// provider is verified with `accountService.paymentsTls` (CA,
 * host name, minimum version, client certificate), its files read here, once,
 * at start; no redirect is followed; time and response size are bounded.
 * Connections are kept open between calls (a top-up does not pay for a new
 * TCP and TLS handshake each time).
 */
export interface PaymentHttpReply {
  readonly status: number;
  /** The JSON body, or null when the body is not JSON. */
  readonly body: unknown;
}

export interface PaymentHttp {
  request(method: 'GET' | 'POST', path: string, body?: unknown, headers?: Record<string, string>): Promise<PaymentHttpReply>;
}

export interface PaymentHttpOptions {
  readonly tls: OutboundTls;
  readonly timeoutMs?: number;
  readonly maxBytes?: number;
}

export function createPaymentHttp(baseUrl: string, opts: PaymentHttpOptions): PaymentHttp {
  const base = baseUrl.replace(/\/$/, '');
  const tls = base.startsWith('https:') ? nodeTlsOptions(opts.tls, new URL(base).hostname, 'accountService.paymentsTls') : null;
  const agent = keepAliveAgent(tls);
  return {
    async request(method, path, body, headers = {}) {
      let reply;
      try {
        reply = await httpExchange(`${base}${path}`, {
          method,
          headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
          body: body === undefined ? undefined : JSON.stringify(body),
          tls,
          agent,
          timeoutMs: opts.timeoutMs ?? 10_000,
          maxBytes: opts.maxBytes ?? 64 * 1024,
        });
      } catch (err) {
        throw new PaymentUnavailableError(err);
      }
      // Redirects are not followed: the provider is reached at its configured URL or not at all.
      if (reply.status >= 300 && reply.status < 400) throw new PaymentUnavailableError(new Error(`HTTP ${reply.status}`));
      return { status: reply.status, body: parseJsonBody(reply.body) ?? null };
    },
  };
}
