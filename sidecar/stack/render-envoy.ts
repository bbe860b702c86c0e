// Container entrypoint step: node --import tsx sidecar/stack/render-envoy.ts OUT_FILE
//
// Renders Envoy's bootstrap from the same configuration and environment the
// sidecar reads (GATEWAY_CONFIG, GATEWAY_PORT, UPSTREAM_URL, ACCOUNT_SERVICE_URL,
// …; see the README), so an override reaches both. Run at container start
// (docker-compose: the envoy-config service; Kubernetes: an init container),
// writing to a volume Envoy reads. ENVOY_SIDECAR_ADDRESS says how Envoy reaches
// the sidecar when that differs from where the sidecar listens (compose:
// "sidecar:50051"; in a Pod both use the same unix socket, so it is unset);
// a comma-separated list puts several sidecar processes behind Envoy's one
// sidecar cluster (several sidecar containers in a Pod, each its own socket).
// A configuration with problems lists them all on stderr and exits 2.
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ConfigError, loadConfig } from '../src/config/load.js';
import { renderEnvoyConfig } from './envoy-config.js';

/** Envoy's bootstrap for this environment (throws ConfigError listing every problem). */
export function renderFromEnvironment(env: NodeJS.ProcessEnv = process.env): string {
  const cfg = loadConfig({ env });
  const addresses = (env.ENVOY_SIDECAR_ADDRESS ?? '').split(',').map((a) => a.trim()).filter((a) => a !== '');
  return renderEnvoyConfig(cfg, addresses.length ? { sidecarAddresses: addresses } : {});
}

if (import.meta.url === pathToFileURL(resolve(process.argv[1] ?? '')).href) {
  const out = process.argv[2];
  if (!out) {
    process.stderr.write('usage: render-envoy.ts OUT_FILE\n');
    process.exit(64);
  }
  let yaml: string;
  try {
    yaml = renderFromEnvironment();
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`${err.message}\n`);
    process.exit(2);
  }
  mkdirSync(dirname(out), { recursive: true });
  // Written whole, then renamed: Envoy never reads half a file.
  writeFileSync(`${out}.tmp`, yaml);
  renameSync(`${out}.tmp`, out);
  process.stdout.write(`rendered ${out}\n`);
}
