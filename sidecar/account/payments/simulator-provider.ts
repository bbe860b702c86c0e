import type { PaymentHttp } from './http-client.js';
import { PaymentUnavailableError, type CardDetails, type ChargeResult, type PaymentProvider } from './provider.js';

/** The provider interface over the bundled payment simulator's HTTP API (sidecar/payments). */
export function createSimulatorProvider(http: PaymentHttp): PaymentProvider {
  return {
    async card(token): Promise<CardDetails | null> {
      const r = await http.request('GET', `/v1/tokens/${encodeURIComponent(token)}`);
      if (r.status === 404) return null;
      const b = r.body as { brand?: unknown; last4?: unknown } | null;
      if (r.status !== 200 || typeof b?.brand !== 'string' || typeof b.last4 !== 'string') throw new PaymentUnavailableError();
      return { brand: b.brand, last4: b.last4 };
    },
    async charge(input): Promise<ChargeResult> {
      const r = await http.request(
        'POST',
        '/v1/charges',
        { token: input.token, amount: input.amount, currency: input.currency, description: input.description },
        { 'idempotency-key': input.idempotencyKey },
      );
      const b = r.body as { id?: unknown; error?: { code?: unknown } } | null;
      if (r.status === 200 && typeof b?.id === 'string') return { status: 'succeeded', chargeId: b.id };
      if (r.status === 402) return { status: 'declined', reason: typeof b?.error?.code === 'string' ? b.error.code : 'card_declined' };
      if (r.status === 404) return { status: 'declined', reason: 'unknown_card' };
      return { status: 'failed' };
    },
  };
}
