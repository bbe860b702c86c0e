import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mergeConfig, parseConfig } from '../../sidecar/src/config/load.js';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import type { Config } from '../../sidecar/src/config/schema.js';
import { requireEnvoy } from '../../sidecar/stack/envoy-bin.js';
import { startStack, type Stack } from '../../sidecar/stack/stack.js';
import { AdminClient } from '../../sidecar/cli/admin-client.js';
import { freePort } from './ports.js';
import { ensureDevIdentity, mintSession, type MintOptions } from '../../sidecar/stack/dev-idp.js';
import { startRedis, type RedisServer } from './redis.js';
import { withHttpsSimulator } from '../../sidecar/stack/dev-ca.js';

/**
 * The real topology for integration tests: redis-server (optional), the
 * upstream simulator, the account service, the sidecar and real Envoy, all on
 * free ports. A missing Envoy fails the suite with a clear message.
 */
export interface TestGateway {
  readonly stack: Stack;
  readonly config: Config;
  /** Gateway base URL including /v1. */
  readonly base: string;
  readonly admin: AdminClient;
  readonly tenantId: string;
  /** A valid key with scope ai. */
  readonly key: string;
  readonly redis: RedisServer | null;
  readonly upstreamKey: string;
  /** The payment simulator's base URL (billing: true), else null. */
  readonly paymentsUrl: string | null;
  /** Mints a platform session token trusted by this gateway. */
  session(opts: Omit<MintOptions, 'userId'> & { userId?: string }): Promise<string>;
  /** Mints a token with a key pair this gateway does not trust. */
  foreignSession(opts: Omit<MintOptions, 'userId'> & { userId?: string }): Promise<string>;
  sim(path: string, init?: RequestInit): Promise<any>;
  stop(): Promise<void>;
}

export interface GatewayOptions {
  readonly store?: 'memory' | 'redis';
  /** Deep-merged over the test defaults. */
  readonly config?: Record<string, unknown>;
  readonly simulatorArgs?: readonly string[];
  readonly env?: NodeJS.ProcessEnv;
  readonly nodeArgs?: Readonly<Record<string, readonly string[]>>;
  /** Use this Redis (another gateway's) instead of starting one: several instances on one store. */
  readonly redisUrl?: string;
  /** The started redis-server keeps its data across restarts (append-only file). */
  readonly redisPersistent?: boolean;
  /** false: start no simulator (the test runs its own at the upstream URL it configures). */
  readonly simulator?: boolean;
  /** The simulator on HTTPS with a local CA the gateway trusts, as `SIMULATOR_TLS=1 npm start` does. */
  readonly simulatorTls?: boolean;
  /** Billing on (the account service's /credits*) with the bundled payment simulator as the provider. */
  readonly billing?: boolean | 'no-payments';
  /** Sidecar processes behind Envoy (default 1; more need store: 'redis'). */
  readonly sidecars?: number;
}



/**
 * Starts the topology on free ports. A port that was free when picked can be
 * taken by another process (or an outgoing connection) before a server binds
 * it; then the whole start is tried again on fresh ports (at most 3 times).
 */
export async function startGateway(opts: GatewayOptions = {}): Promise<TestGateway> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startGatewayOnce(opts);
    } catch (err) {
      if (attempt >= 3 || !/address already in use|EADDRINUSE/i.test((err as Error).message)) throw err;
    }
  }
}

async function startGatewayOnce(opts: GatewayOptions): Promise<TestGateway> {
  const envoyBin = requireEnvoy();
  const redis = opts.store === 'redis' && !opts.redisUrl ? await startRedis({ persistent: opts.redisPersistent }) : null;
  const redisUrl = opts.redisUrl ?? redis?.url;
  const [gateway, envoyAdmin, admin, simulator, account, payments] = await Promise.all([freePort(), freePort(), freePort(), freePort(), freePort(), freePort()]);
  const paymentsUrl = opts.billing === true ? `http://127.0.0.1:${payments}` : null;
  const runDir = mkdtempSync(join(tmpdir(), 'gw-test-'));
  const upstreamKey = 'sk-provider-test-secret';
  const idp = await ensureDevIdentity(join(runDir, 'dev-idp'));
  const foreignIdp = await ensureDevIdentity(join(runDir, 'foreign-idp'));
  const raw = mergeConfig(defaultConfig('svc'), {
    listen: {
      gateway: { host: '127.0.0.1', port: gateway },
      envoyAdmin: { host: '127.0.0.1', port: envoyAdmin },
      admin: { host: '127.0.0.1', port: admin },
      sidecarGrpc: `unix:${join(runDir, 'sidecar.sock')}`,
    },
    upstream: { baseUrl: `http://127.0.0.1:${simulator}/v1`, apiKeyEnv: 'TEST_UPSTREAM_KEY', idleTimeoutMs: 3000 },
    accountService: { url: `http://127.0.0.1:${account}`, billingEnabled: Boolean(opts.billing), paymentsUrl },
    identity: { jwksFile: idp.jwksFile },
    log: { level: 'info' },
    // A stop waits this long at most for exchanges a test left open.
    shutdown: { drainSeconds: 5 },
    // Each gateway journals its own pending settlements (never the repo's .run/ shared by all).
    billing: { journalPath: join(runDir, 'settlement-journal.jsonl') },
    ...(redisUrl ? { store: { kind: 'redis', url: redisUrl } } : {}),
  });
  const merged = parseConfig(mergeConfig(raw, opts.config ?? {}));
  const https = opts.simulatorTls ? withHttpsSimulator(merged, join(runDir, 'dev-ca')) : null;
  const config = https?.config ?? merged;
  let stack: Stack;
  try {
    stack = await startStack({
      config,
      envoyBin,
      runDir,
      simulator: opts.simulator ?? true,
      simulatorArgs: ['--api-key', upstreamKey, ...(https?.simulatorArgs ?? []), ...(opts.simulatorArgs ?? [])],
      paymentSimulator: paymentsUrl !== null,
      // No start-up provider check: tests count the simulator's requests (test/unit/first-hour.test.ts covers it).
      env: { TEST_UPSTREAM_KEY: upstreamKey, PROVIDER_CHECK: '0', ...(opts.env ?? {}) },
      nodeArgs: opts.nodeArgs,
      sidecars: opts.sidecars,
    });
  } catch (err) {
    await redis?.stop();
    rmSync(runDir, { recursive: true, force: true });
    throw err;
  }
  const adminClient = new AdminClient(stack.adminUrl, stack.adminToken);
  const tenant = await adminClient.createTenant('test tenant');
  const created = await adminClient.createKey(tenant.id, { name: 'test', scopes: ['ai'] });
  return {
    stack,
    config,
    base: `${stack.gatewayUrl}/v1`,
    admin: adminClient,
    tenantId: tenant.id,
    key: created.key,
    redis,
    upstreamKey,
    paymentsUrl,
    session: (o) => mintSession(idp.privateJwkFile, { userId: 'usr_test', ...o }),
    foreignSession: (o) => mintSession(foreignIdp.privateJwkFile, { userId: 'usr_test', ...o }),
    async sim(path, init) {
      const res = await fetch(`${stack.simulatorUrl}${path}`, init);
      return res.json();
    },
    async stop() {
      await stack.stop();
      await redis?.stop();
      rmSync(runDir, { recursive: true, force: true });
    },
  };
}

/** The error envelope shape every gateway error must have. */
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
