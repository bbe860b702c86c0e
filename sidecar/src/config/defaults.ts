/**
 * Embedded defaults: with no config file at all, `npm start` runs the whole
 * local stack against the bundled upstream simulator.
 */
export function defaultModels(brand: string) {
  const family = (tier: string, kind: 'chat' | 'embedding', model: string, floor: number | null = null, maxOutputTokens = 4096) => ({
    alias: `${brand}-${tier}`,
    pinned: `${brand}-${tier}-2026-08`,
    kind,
    owner: brand,
    model,
    pinnedModel: model,
    maxTokensFloor: floor,
    maxOutputTokens,
  });
  return [
    family('quick', 'chat', 'sim-quick-1'),
    family('core', 'chat', 'sim-core-1'),
    family('deep', 'chat', 'sim-deep-r1', 8000, 32768),
    family('embed', 'embedding', 'sim-embed-1'),
  ];
}

/** Simulator prices, micro-CHF: per million tokens (chat) or per input string (embeddings). */
export const defaultPrices = {
  'sim-quick-1': { inputPerMillion: 100_000, outputPerMillion: 400_000 },
  'sim-core-1': { inputPerMillion: 500_000, outputPerMillion: 1_500_000 },
  'sim-deep-r1': { inputPerMillion: 2_000_000, outputPerMillion: 8_000_000 },
  'sim-embed-1': { perInput: 20 },
};

export function defaultConfig(brand: string): Record<string, unknown> {
  return {
    brand,
    listen: {
      gateway: { host: '127.0.0.1', port: 8080 },
      envoyAdmin: { host: '127.0.0.1', port: 9901 },
      sidecarGrpc: '127.0.0.1:50051',
      admin: { host: '127.0.0.1', port: 8090 },
    },
    upstream: { baseUrl: 'http://127.0.0.1:8000/v1', apiKeyEnv: 'UPSTREAM_API_KEY', apiKeyFile: null },
    accountService: { url: 'http://127.0.0.1:8081', billingEnabled: false },
    models: defaultModels(brand),
    billing: { prices: defaultPrices },
  };
}
