// CLI: npx tsx sidecar/stack/compose-config.ts
// Renders envoy/envoy.yaml (the Envoy bootstrap docker-compose.yml mounts)
// from envoy/gateway.yaml. test/unit/compose-drift.test.ts checks that the
// committed file is exactly what this renders.
import { writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { loadConfig } from '../src/config/load.js';
import { identityHeaderNames } from '../src/adapters/envoy/authz-service.js';
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
  const bootstrap = buildEnvoyBootstrap(cfg, {
    sidecarAddress: COMPOSE_SIDECAR_ADDRESS,
    internalHeaders: identityHeaderNames(cfg.brand),
  });
  return toYaml(resolveSidecarByDns(bootstrap));
}

type Plain = Record<string, unknown>;
const isPlain = (v: unknown): v is Plain => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * buildEnvoyBootstrap always renders the sidecar cluster as STATIC, which
 * Envoy rejects for a host name ("malformed IP address: sidecar"). On the
 * compose network the sidecar is a service name, so switch that cluster to
 * STRICT_DNS (as the provider/account clusters already are for host names).
 * A no-op for an IP or unix-socket address, or if the cluster already is DNS.
 */
export function resolveSidecarByDns(bootstrap: Plain): Plain {
  const resources = bootstrap.static_resources;
  const clusters = isPlain(resources) && Array.isArray(resources.clusters) ? resources.clusters : [];
  for (const c of clusters) {
    if (!isPlain(c) || c.name !== 'sidecar' || c.type !== 'STATIC') continue;
    const la = c.load_assignment;
    const eps = isPlain(la) && Array.isArray(la.endpoints) ? la.endpoints : [];
    const hosts = eps.flatMap((e: unknown) =>
      isPlain(e) && Array.isArray(e.lb_endpoints)
        ? e.lb_endpoints.map((lb: unknown) => {
            const ep = isPlain(lb) ? lb.endpoint : undefined;
            const addr = isPlain(ep) ? ep.address : undefined;
            const sa = isPlain(addr) ? addr.socket_address : undefined;
            return isPlain(sa) && typeof sa.address === 'string' ? sa.address : null;
          })
        : [],
    );
    if (hosts.some((h) => h !== null && isIP(h) === 0)) {
      c.type = 'STRICT_DNS';
      c.dns_lookup_family = 'V4_PREFERRED';
    }
  }
  return bootstrap;
}

const invokedAs = process.argv[1];
if (invokedAs && import.meta.url === pathToFileURL(resolve(invokedAs)).href) {
  writeFileSync(COMPOSE_ENVOY_CONFIG, renderComposeEnvoyConfig());
  process.stdout.write(`wrote ${COMPOSE_ENVOY_CONFIG} from ${COMPOSE_GATEWAY_CONFIG}\n`);
}
