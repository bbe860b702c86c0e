// CLI: npx tsx sidecar/stack/compose-config.ts
// Renders envoy/envoy.yaml (the Envoy bootstrap docker-compose.yml mounts)
// from envoy/gateway.yaml. test/unit/compose-drift.test.ts checks that the
// committed file is exactly what this renders.
import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { loadConfig } from '../src/config/load.js';
import { buildEnvoyBootstrap, toYaml } from './envoy-config.js';
import { REPO_ROOT } from './paths.js';

/** The gateway config the compose stack uses (mounted into the sidecar container). */
export const COMPOSE_GATEWAY_CONFIG = join(REPO_ROOT, 'envoy', 'gateway.yaml');
/** The rendered Envoy bootstrap (mounted into the envoy container). */
export const COMPOSE_ENVOY_CONFIG = join(REPO_ROOT, 'envoy', 'envoy.yaml');
/** How Envoy reaches the sidecar on the compose network: its service name. */
export const COMPOSE_SIDECAR_ADDRESS = 'sidecar:50051';

/**
 * The Envoy bootstrap for docker-compose.yml, as YAML. Reads envoy/gateway.yaml
 * with an empty environment, so nothing from the host leaks into the file.
 */
export function renderComposeEnvoyConfig(): string {
  const cfg = loadConfig({ path: COMPOSE_GATEWAY_CONFIG, env: {} });
  const bootstrap = buildEnvoyBootstrap(cfg, { sidecarAddress: COMPOSE_SIDECAR_ADDRESS });
  return toYaml(bootstrap);
}

if (import.meta.url === pathToFileURL(resolve(process.argv[1] ?? '')).href) {
  writeFileSync(COMPOSE_ENVOY_CONFIG, renderComposeEnvoyConfig());
  process.stdout.write(`wrote ${COMPOSE_ENVOY_CONFIG}\n`);
}
