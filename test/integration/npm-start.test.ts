/**
 * `npm start` itself (sidecar/stack/start.ts) on free ports: the development
 * tenant on a persistent Redis, log files, and starts that fail.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManagedProcess } from '../../sidecar/stack/process.js';
import { REPO_ROOT } from '../../sidecar/stack/paths.js';
import { requireEnvoy } from '../../sidecar/stack/envoy-bin.js';
import { assertPortsFree } from '../../sidecar/stack/preflight.js';
import { AdminClient } from '../../sidecar/cli/admin-client.js';
import { freePort } from '../harness/ports.js';
import { startRedis, type RedisServer } from '../harness/redis.js';

interface Ports {
  gateway: number;
  envoyAdmin: number;
  admin: number;
  upstream: number;
  account: number;
}

async function ports(): Promise<Ports> {
  const [gateway, envoyAdmin, admin, upstream, account] = await Promise.all([freePort(), freePort(), freePort(), freePort(), freePort()]);
  return { gateway, envoyAdmin, admin, upstream, account };
}

function start(runDir: string, p: Ports, extra: NodeJS.ProcessEnv): ManagedProcess {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    RUN_DIR: runDir,
    GATEWAY_PORT: String(p.gateway),
    ENVOY_ADMIN_PORT: String(p.envoyAdmin),
    ADMIN_PORT: String(p.admin),
    UPSTREAM_URL: `http://127.0.0.1:${p.upstream}/v1`,
    ACCOUNT_SERVICE_URL: `http://127.0.0.1:${p.account}`,
    START_SIMULATOR: '1',
    ...extra,
  };
  for (const k of ['GATEWAY_CONFIG', 'ADMIN_TOKEN', ...(extra.REDIS_URL ? [] : ['REDIS_URL'])]) delete env[k];
  return new ManagedProcess('npm-start', process.execPath, ['--import', 'tsx', join(REPO_ROOT, 'sidecar/stack/start.ts')], { env, cwd: REPO_ROOT });
}

const ready = (l: string) => (l.includes('Ctrl-C stops everything.') ? true : undefined);
const output = (p: ManagedProcess) => p.lines.join('\n');

/** Waits for the process to exit (it is expected to fail). */
async function exitOf(p: ManagedProcess): Promise<void> {
  for (let i = 0; i < 600 && p.running; i++) await new Promise((r) => setTimeout(r, 100));
  expect(p.running).toBe(false);
}

describe('npm start on a persistent Redis: the development tenant is created once and reused', () => {
  let redis: RedisServer;
  let runDir: string;
  beforeAll(async () => {
    requireEnvoy();
    redis = await startRedis();
    runDir = mkdtempSync(join(tmpdir(), 'npm-start-'));
  });
  afterAll(async () => {
    await redis?.stop();
    if (runDir) rmSync(runDir, { recursive: true, force: true });
  });

  it('says it creates them, reuses them on the next start, and creates nothing when told not to', async () => {
    const p = await ports();
    const first = start(runDir, p, { REDIS_URL: redis.url });
    try {
      await first.waitForLine(ready, 90_000);
    } finally {
      await first.stop(10_000);
    }
    const created = /Created a development tenant (ten_\w+), a key and 100 CHF of credit in redis:\/\/127\.0\.0\.1:\d+.*START_DEV_TENANT=0/.exec(output(first));
    expect(created, output(first)).not.toBeNull();
    const tenantId = created![1]!;
    const key = readFileSync(join(runDir, 'dev-key'), 'utf8').trim();
    // The banner names every log file, and they hold the processes' output.
    for (const name of ['simulator', 'account', 'sidecar', 'envoy']) {
      const file = join(runDir, 'logs', `${name}.log`);
      expect(output(first)).toContain(file);
      expect(existsSync(file)).toBe(true);
    }
    expect(readFileSync(join(runDir, 'logs', 'sidecar.log'), 'utf8')).toContain('sidecar ready');

    const second = start(runDir, p, { REDIS_URL: redis.url });
    let tenants: Array<{ id: string; name: string }>;
    let balance: number;
    try {
      await second.waitForLine(ready, 90_000);
      const admin = new AdminClient(`http://127.0.0.1:${p.admin}`, readFileSync(join(runDir, 'admin-token'), 'utf8').trim());
      tenants = (await admin.listTenants()).data;
      balance = (await admin.account(tenantId)).balance;
      // The remembered key still works through the gateway.
      const models = await fetch(`http://127.0.0.1:${p.gateway}/v1/models`, { headers: { 'x-api-key': key } });
      expect(models.status).toBe(200);
    } finally {
      await second.stop(10_000);
    }
    expect(output(second)).toContain(`Reusing the development tenant ${tenantId} created earlier in redis://127.0.0.1:`);
    expect(tenants.filter((t) => t.name === 'development').map((t) => t.id)).toEqual([tenantId]);
    expect(balance).toBe(100_000_000); // granted once
    expect(readFileSync(join(runDir, 'dev-key'), 'utf8').trim()).toBe(key);

    const third = start(runDir, p, { REDIS_URL: redis.url, START_DEV_TENANT: '0' });
    try {
      await third.waitForLine(ready, 90_000);
    } finally {
      await third.stop(10_000);
    }
    expect(output(third)).toContain('Development key:  none (START_DEV_TENANT=0)');
    expect(output(third)).not.toMatch(/Created a development tenant|Reusing/);
  }, 300_000);
});

describe('a failed start names what failed and where, and leaves nothing running', () => {
  it('a Redis URL with nothing listening: the URL, the cause, what to do; nothing was started', async () => {
    const runDir = mkdtempSync(join(tmpdir(), 'npm-start-'));
    const p = await ports();
    const dead = await freePort();
    const s = start(runDir, p, { REDIS_URL: `redis://127.0.0.1:${dead}` });
    await exitOf(s);
    expect(output(s)).toContain(`failed to start: Redis at redis://127.0.0.1:${dead} did not answer (ECONNREFUSED)`);
    expect(output(s)).toContain('REDIS_URL');
    expect(existsSync(join(runDir, 'logs'))).toBe(false);
    rmSync(runDir, { recursive: true, force: true });
  }, 120_000);

  it('Envoy failing after the others started: the error names it, and every port is free again', async () => {
    const runDir = mkdtempSync(join(tmpdir(), 'npm-start-'));
    const p = await ports();
    // An Envoy that reports its version and then refuses to run (as a bad config or a missing library would).
    const fakeEnvoy = join(runDir, 'envoy');
    writeFileSync(fakeEnvoy, '#!/bin/sh\n[ "$1" = --version ] && { echo "envoy  version: 0/1.40.0/Clean/RELEASE/BoringSSL"; exit 0; }\necho "cannot start" >&2\nexit 1\n', { mode: 0o755 });
    const s = start(runDir, p, { ENVOY_BIN: fakeEnvoy });
    await exitOf(s);
    expect(output(s)).toMatch(/failed to start: envoy exited before it was ready/);
    expect(output(s)).toContain('[envoy] cannot start');
    // The simulator, account service and sidecar it had started are gone: their ports can be bound again.
    await expect(
      assertPortsFree([
        { what: 'simulator', host: '127.0.0.1', port: p.upstream },
        { what: 'account', host: '127.0.0.1', port: p.account },
        { what: 'sidecar operator API', host: '127.0.0.1', port: p.admin },
      ]),
    ).resolves.toBeUndefined();
    rmSync(runDir, { recursive: true, force: true });
  }, 120_000);
});
