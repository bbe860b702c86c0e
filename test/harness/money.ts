import type { Config } from '../../sidecar/src/config/schema.js';
import { admitBody } from '../../sidecar/src/domain/admission.js';
import { worstCase } from '../../sidecar/src/domain/billing/pricing.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';

/** The credit hold the gateway places for a chat body (the same pure functions the sidecar runs). */
export function holdFor(config: Config, body: unknown): number {
  const catalog = new Catalog(config.models, config.brand);
  const a = admitBody('chat', 'POST', Buffer.from(JSON.stringify(body)), {
    catalog,
    defaultTemperature: config.defaults.temperature,
    maxEmbeddingInputs: config.limits.maxEmbeddingInputs,
    maxRequestBytes: config.limits.maxRequestBytes,
  });
  if (!a.ok) throw new Error('test body refused');
  return worstCase(config.billing.prices[a.ctx.resolved.internalModel]!, a.ctx, a.ctx.promptBytes, a.ctx.messageCount).cost;
}
