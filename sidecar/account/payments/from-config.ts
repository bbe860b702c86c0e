import type { Config } from '../../src/config/schema.js';
import { createPaymentHttp } from './http-client.js';
import type { PaymentProvider } from './provider.js';
import { createSimulatorProvider } from './simulator-provider.js';

/**
 * The configured payment provider (today: the simulator's API), or null when none is configured.
 * An https:// provider's TLS files are read now: an unreadable one stops the start, naming the setting.
 */
export function paymentsFromConfig(cfg: Config): PaymentProvider | null {
  const url = cfg.accountService.paymentsUrl;
  return url ? createSimulatorProvider(createPaymentHttp(url, { tls: cfg.accountService.paymentsTls })) : null;
}
