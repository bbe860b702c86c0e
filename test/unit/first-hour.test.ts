import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../sidecar/src/config/load.js';
import type { Config } from '../../sidecar/src/config/schema.js';
import { checkProvider } from '../../sidecar/src/adapters/provider-check.js';
import { buildEnvoyBootstrap } from '../../sidecar/stack/envoy-config.js';
import { wantsSimulator } from '../../sidecar/stack/start.js';
import { assertPortsFree, assertRedisReachable } from '../../sidecar/stack/preflight.js';
import { createSimulator, type Simulator } from '../../sidecar/simulator/server.js';
import { REPO_ROOT } from '../../sidecar/stack/paths.js';
import { freePort } from '../harness/ports.js';
import { startRedis } from '../harness/redis.js';

// Temporary folders of this file, removed after it.
const temps = mkdtempSync(join(tmpdir(), 'first-hour-'));
afterAll(() => rmSync(temps, { recursive: true, force: true }));

const EXAMPLES = join(REPO_ROOT, 'examples', 'config');
const example = (name: string) => loadConfig({ path: join(EXAMPLES, name), env: {} });

describe('example configurations (examples/config)', () => {
  it('every example loads and validates', () => {
    const files = readdirSync(EXAMPLES).filter((f) => f.endsWith('.yaml'));
    expect(files.sort()).toEqual(['https-provider.yaml', 'ollama.yaml', 'vllm.yaml']);
    for (const f of files) expect(() => example(f), f).not.toThrow();
  });

  it('HTTPS provider: its own prices and currency, the key from a variable, TLS with SNI to the provider', () => {
    const cfg = example('https-provider.yaml');
    expect(cfg.billing.currency).toBe('EUR');
    expect(cfg.billing.creditCheck).toBe(true);
    expect(cfg.upstream.apiKeyEnv).toBe('PROVIDER_API_KEY');
    for (const m of cfg.models) expect(cfg.billing.prices[m.model], m.model).toBeDefined();
    const clusters = (buildEnvoyBootstrap(cfg).static_resources as { clusters: Array<Record<string, any>> }).clusters;
    const provider = clusters.find((c) => c.name === 'provider')!;
    expect(provider.transport_socket.typed_config.sni).toBe('api.provider.example');
    expect(provider.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value).toBe(443);
  });

  it('vLLM: a key file, the default simulator port, and yet no simulator (the file names the upstream)', () => {
    const cfg = example('vllm.yaml');
    expect(cfg.upstream.apiKeyFile).toBe('.run/vllm-api-key');
    expect(cfg.upstream.baseUrl).toBe('http://127.0.0.1:8000/v1');
    expect(wantsSimulator(cfg, { GATEWAY_CONFIG: join(EXAMPLES, 'vllm.yaml') })).toBe(false);
  });

  it('Ollama: no key, its port, four families', () => {
    const cfg = example('ollama.yaml');
    expect(cfg.upstream.apiKeyEnv).toBeNull();
    expect(cfg.upstream.apiKeyFile).toBeNull();
    expect(new URL(cfg.upstream.baseUrl).port).toBe('11434');
    expect(cfg.models.map((m) => m.kind)).toEqual(['chat', 'chat', 'chat', 'embedding']);
  });
});

describe('npm start starts the bundled simulator only for the default upstream', () => {
  const defaults = loadConfig({ env: {} });
  it('embedded defaults: yes', () => expect(wantsSimulator(defaults, {})).toBe(true));
  it('a provider on localhost named by UPSTREAM_URL, even on the default port: no', () => {
    for (const url of ['http://127.0.0.1:8001/v1', 'http://localhost:11434/v1', 'http://127.0.0.1:8000/v1']) {
      const env = { UPSTREAM_URL: url };
      expect(wantsSimulator(loadConfig({ env }), env), url).toBe(false);
    }
  });
  it('a config file that names the upstream: no; one that does not: yes', () => {
    const dir = mkdtempSync(join(temps, 'd-'));
    const named = join(dir, 'named.yaml');
    const other = join(dir, 'other.yaml');
    writeFileSync(named, 'upstream:\n  baseUrl: http://127.0.0.1:8000/v1\n');
    writeFileSync(other, 'billing:\n  creditCheck: true\n');
    expect(wantsSimulator(loadConfig({ path: named, env: {} }), { GATEWAY_CONFIG: named })).toBe(false);
    expect(wantsSimulator(loadConfig({ path: other, env: {} }), { GATEWAY_CONFIG: other })).toBe(true);
  });
  it('START_SIMULATOR=1 forces it, 0 forbids it', () => {
    expect(wantsSimulator(defaults, { START_SIMULATOR: '0' })).toBe(false);
    expect(wantsSimulator(loadConfig({ env: { UPSTREAM_URL: 'http://127.0.0.1:9/v1' } }), { UPSTREAM_URL: 'http://127.0.0.1:9/v1', START_SIMULATOR: '1' })).toBe(true);
  });
});

describe('start-up provider check (against the real simulator)', () => {
  let sim: Simulator;
  let base: string;
  beforeAll(async () => {
    sim = createSimulator({ apiKey: 'sk-right', models: ['sim-quick-1', 'sim-core-1', 'sim-embed-1'] });
    const { port } = await sim.listen(0, '127.0.0.1');
    base = `http://127.0.0.1:${port}/v1`;
  });
  afterAll(async () => {
    await sim.close();
  });
  const cfgFor = (baseUrl: string, over: Record<string, unknown> = {}): Config =>
    loadConfig({ env: { UPSTREAM_URL: baseUrl }, path: undefined, ...over });

  it('names the configured internal models the provider does not list (and the aliases; log form: aliases only)', async () => {
    const findings = await checkProvider(cfgFor(base), { env: { UPSTREAM_API_KEY: 'sk-right' } });
    expect(findings).toHaveLength(1);
    expect(findings[0]!.kind).toBe('models_missing');
    expect(findings[0]!.message).toContain('sim-deep-r1');
    expect(findings[0]!.message).toContain('svc-deep, svc-deep-2026-08');
    expect(findings[0]!.logMessage).not.toContain('sim-');
  });

  it('a missing or empty key: a warning naming the variable, and the provider\'s 401 said as such', async () => {
    for (const env of [{}, { UPSTREAM_API_KEY: '  ' }]) {
      const findings = await checkProvider(cfgFor(base), { env });
      expect(findings.map((f) => f.kind)).toEqual(['key_missing', 'unauthorized']);
      expect(findings[0]!.message).toContain('UPSTREAM_API_KEY');
      expect(findings[1]!.message).toMatch(/answered 401/);
    }
    const wrong = await checkProvider(cfgFor(base), { env: { UPSTREAM_API_KEY: 'sk-wrong' } });
    expect(wrong.map((f) => f.kind)).toEqual(['unauthorized']);
  });

  it('an unreadable key file is named; a provider that is down is a warning, not an error', async () => {
    const dir = mkdtempSync(join(temps, 'd-'));
    const cfgPath = join(dir, 'gw.yaml');
    writeFileSync(cfgPath, `upstream:\n  baseUrl: http://127.0.0.1:${await freePort()}/v1\n  apiKeyFile: ${join(dir, 'absent-key')}\n`);
    const findings = await checkProvider(loadConfig({ path: cfgPath, env: {} }), { env: {}, timeoutMs: 2000 });
    expect(findings.map((f) => f.kind)).toEqual(['key_file_unreadable', 'unreachable']);
    expect(findings[0]!.message).toContain('absent-key');
    expect(findings[1]!.message).toMatch(/did not answer GET http:\/\/127\.0\.0\.1:\d+\/v1\/models \(ECONNREFUSED\)/);
  });

  it('all good: no findings', async () => {
    const full = createSimulator({});
    const { port } = await full.listen(0, '127.0.0.1');
    try {
      expect(await checkProvider(cfgFor(`http://127.0.0.1:${port}/v1`), { env: {}, keyRequired: false })).toEqual([]);
    } finally {
      await full.close();
    }
  });
});

describe('start preflight: the failure names what and where', () => {
  it('a port in use names the port, its host and the setting that moves it', async () => {
    const port = await freePort();
    const holder: Server = createServer();
    await new Promise<void>((r) => holder.listen(port, '127.0.0.1', r));
    try {
      await expect(assertPortsFree([{ what: 'sidecar operator API (listen.admin, ADMIN_PORT)', host: '127.0.0.1', port }])).rejects.toThrow(
        `port ${port} on 127.0.0.1 is already in use: sidecar operator API (listen.admin, ADMIN_PORT)`,
      );
    } finally {
      holder.close();
    }
    await expect(assertPortsFree([{ what: 'x', host: '127.0.0.1', port }])).resolves.toBeUndefined();
  });

  it('Redis with nothing listening names the URL (password hidden) and what to do; a live one passes', async () => {
    const port = await freePort();
    await expect(assertRedisReachable(`redis://:hunter2secret@127.0.0.1:${port}`)).rejects.toThrow(
      new RegExp(`Redis at redis://:\\*\\*\\*@127\\.0\\.0\\.1:${port} did not answer \\(ECONNREFUSED\\).*REDIS_URL`),
    );
    const redis = await startRedis();
    try {
      await expect(assertRedisReachable(redis.url)).resolves.toBeUndefined();
    } finally {
      await redis.stop();
    }
  });
});

