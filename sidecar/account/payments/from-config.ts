import type { Config } from '../../src/config/schema.js';
import { createPaymentHttp } from './http-client.js';
import type { PaymentProvider } from './provider.js';
import { createSimulatorProvider } from './simulator-provider.js';

/** The configured payment provider (today: the simulator's API), or null when none is configured. */
export function paymentsFromConfig(cfg: Config): PaymentProvider | null {
  const url = cfg.accountService.paymentsUrl;
  return url ? createSimulatorProvider(createPaymentHttp(url)) : null;
}
