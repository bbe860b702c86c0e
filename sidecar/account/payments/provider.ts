/**
 * The payment-provider interface the account service charges cards through.
 * Cards are only ever tokens the provider handed out (the caller's browser or
 * the payment simulator tokenises the number); the service stores the token,
 * the brand and the last four digits, never a number.
 */
export interface CardDetails {
  readonly brand: string;
  readonly last4: string;
}

export interface ChargeInput {
  readonly token: string;
  /** Micro-units of the currency. */
  readonly amount: number;
  readonly currency: string;
  /** The provider applies a charge with the same key once and answers the first result again. */
  readonly idempotencyKey: string;
  readonly description: string;
}

export type ChargeResult =
  | { readonly status: 'succeeded'; readonly chargeId: string }
  /** Final: the card said no. */
  | { readonly status: 'declined'; readonly reason: string }
  /** Transient: the provider could not decide; the same idempotency key may be tried again. */
  | { readonly status: 'failed' };

export interface PaymentProvider {
  /** The card behind a token, or null when the provider does not know it. Throws PaymentUnavailableError. */
  card(token: string): Promise<CardDetails | null>;
  charge(input: ChargeInput): Promise<ChargeResult>;
}

export class PaymentUnavailableError extends Error {
  constructor(cause?: unknown) {
    super('payment provider unavailable', { cause });
    this.name = 'PaymentUnavailableError';
  }
}
