/**
 * Configuration: embedded defaults, YAML merge, environment overrides,
 * all-problems-at-once errors, deep freezing, alias rules, provider key.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { defaultConfig, defaultModels, defaultPrices } from '../../sidecar/src/config/defaults.js';
import { ConfigError, loadConfig, parseConfig, readUpstreamKey } from '../../sidecar/src/config/load.js';

const dir = mkdtempSync(join(tmpdir(), 'domain-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function file(text: string): string {
  const p = join(dir, `c${n++}.yaml`);
  writeFileSync(p, text);
  return p;
}

function problemsOf(fn: () => unknown): readonly string[] {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as ConfigError).problems;
  }
  throw new Error('expected a ConfigError');
}

type Model = ReturnType<typeof defaultModels>[number];
const withModels = (models: Model[], brand = 'svc') => ({ ...defaultConfig(brand), brand, models });
const chat = (over: Partial<Model> = {}): Model => ({ ...defaultModels('svc')[0]!, ...over });
/** The default prices plus one for each extra internal model a test introduces. */
const pricing = (...extra: string[]) => ({
  prices: { ...defaultPrices, ...Object.fromEntries(extra.map((m) => [m, { inputPerMillion: 1, outputPerMillion: 2 }])) },
});

describe('defaults', () => {
  it('embedded defaults validate and fill schema defaults', () => {
    const cfg = loadConfig({ env: {} });
    expect(cfg.brand).toBe('svc');
    expect(cfg.listen.gateway).toEqual({ host: '127.0.0.1', port: 8080 });
    expect(cfg.store).toEqual({ kind: 'memory' });
    expect(cfg.log.level).toBe('info');
    expect(cfg.defaults.temperature).toBe(0.7);
    expect(cfg.limits.maxEmbeddingInputs).toBe(256);
    expect(cfg.models.map((m) => m.alias)).toEqual(['svc-quick', 'svc-core', 'svc-deep', 'svc-embed']);
    expect(cfg.models.find((m) => m.alias === 'svc-deep')?.maxTokensFloor).toBe(8000);
  });

  it('the result is deeply frozen', () => {
    const cfg = loadConfig({ env: {} });
    expect(Object.isFrozen(cfg)).toBe(true);
    expect(Object.isFrozen(cfg.listen.gateway)).toBe(true);
    expect(Object.isFrozen(cfg.models)).toBe(true);
    expect(Object.isFrozen(cfg.models[0])).toBe(true);
    expect(() => {
      (cfg.listen.gateway as { port: number }).port = 1;
    }).toThrow(TypeError);
  });
});

describe('YAML file', () => {
  it('merges over the defaults key by key', () => {
    const cfg = loadConfig({ path: file('listen:\n  gateway:\n    port: 9999\nlog:\n  level: debug\n'), env: {} });
    expect(cfg.listen.gateway).toEqual({ host: '127.0.0.1', port: 9999 });
    expect(cfg.listen.admin.port).toBe(8090);
    expect(cfg.log.level).toBe('debug');
  });

  it('GATEWAY_CONFIG names the file when no path is given', () => {
    const cfg = loadConfig({ env: { GATEWAY_CONFIG: file('log:\n  level: warn\n') } });
    expect(cfg.log.level).toBe('warn');
  });

  it('an empty file is the defaults; a non-mapping top level is a problem', () => {
    expect(loadConfig({ path: file(''), env: {} }).brand).toBe('svc');
    const problems = problemsOf(() => loadConfig({ path: file('- a\n- b\n'), env: {} }));
    expect(problems.some((p) => p.includes('top level must be a mapping'))).toBe(true);
  });

  it('a brand change renames the default aliases', () => {
    const cfg = loadConfig({ path: file('brand: acme\n'), env: {} });
    expect(cfg.models.map((m) => m.alias)).toEqual(['acme-quick', 'acme-core', 'acme-deep', 'acme-embed']);
    expect(cfg.models.map((m) => m.pinned)).toContain('acme-deep-2026-08');
  });
});

describe('environment overrides', () => {
  const cases: [string, string, (c: ReturnType<typeof loadConfig>) => unknown, unknown][] = [
    ['GATEWAY_PORT', '18080', (c) => c.listen.gateway.port, 18080],
    ['GATEWAY_HOST', '0.0.0.0', (c) => c.listen.gateway.host, '0.0.0.0'],
    ['ENVOY_ADMIN_PORT', '19901', (c) => c.listen.envoyAdmin.port, 19901],
    ['ADMIN_PORT', '18090', (c) => c.listen.admin.port, 18090],
    ['SIDECAR_GRPC', 'unix:/tmp/s.sock', (c) => c.listen.sidecarGrpc, 'unix:/tmp/s.sock'],
    ['UPSTREAM_URL', 'https://api.example.com/v1', (c) => c.upstream.baseUrl, 'https://api.example.com/v1'],
    ['UPSTREAM_API_KEY_FILE', '/run/secrets/k', (c) => c.upstream.apiKeyFile, '/run/secrets/k'],
    ['ACCOUNT_SERVICE_URL', 'https://acct.example.com', (c) => c.accountService.url, 'https://acct.example.com'],
    ['REDIS_URL', 'redis://r:6379/0', (c) => c.store, expect.objectContaining({ kind: 'redis', url: 'redis://r:6379/0' })],
    [
      'REDIS_CLUSTER_NODES',
      'redis://a:7000, redis://b:7001',
      (c) => c.store,
      expect.objectContaining({ kind: 'redis-cluster', nodes: ['redis://a:7000', 'redis://b:7001'], replicaAcks: 0 }),
    ],
    ['LOG_LEVEL', 'error', (c) => c.log.level, 'error'],
    ['IDENTITY_JWKS_FILE', '/etc/jwks.json', (c) => c.identity.jwksFile, '/etc/jwks.json'],
    ['IDENTITY_JWKS_URL', 'https://id.example.com/jwks', (c) => c.identity.jwksUrl, 'https://id.example.com/jwks'],
  ];
  it.each(cases)('%s overrides the file', (name, value, pick, expected) => {
    const path = file('listen:\n  gateway:\n    port: 7000\n    host: h\nlog:\n  level: debug\n');
    expect(pick(loadConfig({ path, env: { [name]: value } }))).toEqual(expected);
  });

  it('empty variables are ignored; a bad port is a problem', () => {
    expect(loadConfig({ env: { GATEWAY_PORT: '', LOG_LEVEL: '' } }).listen.gateway.port).toBe(8080);
    expect(problemsOf(() => loadConfig({ env: { ADMIN_PORT: '70000' } }))).toEqual(['ADMIN_PORT: must be a port number']);
  });
});

describe('store and retention', () => {
  it('a Redis Cluster store takes seed nodes, replica acknowledgements and a retention', () => {
    const path = file(
      'store:\n  kind: redis-cluster\n  nodes: [redis://a:7000, redis://b:7001]\n  replicaAcks: 1\nretention:\n  usageRecordDays: 30\n',
    );
    const cfg = loadConfig({ path, env: {} });
    expect(cfg.store).toMatchObject({ kind: 'redis-cluster', nodes: ['redis://a:7000', 'redis://b:7001'], replicaAcks: 1 });
    expect(cfg.retention).toEqual({ usageRecordDays: 30, ledgerDays: 400 });
  });

  it('REDIS_URL over a Cluster file (and REDIS_CLUSTER_NODES over a single-Redis file) switches the store and keeps the access settings', () => {
    const cluster = file('store:\n  kind: redis-cluster\n  nodes: [redis://a:7000]\n  replicaAcks: 1\n  username: gw\n');
    expect(loadConfig({ path: cluster, env: { REDIS_URL: 'redis://r:6379' } }).store).toMatchObject({ kind: 'redis', url: 'redis://r:6379', username: 'gw' });
    const single = file('store:\n  kind: redis\n  url: redis://r:6379\n  username: gw\n');
    const cfg = loadConfig({ path: single, env: { REDIS_CLUSTER_NODES: 'redis://a:7000,redis://b:7001' } });
    expect(cfg.store).toMatchObject({ kind: 'redis-cluster', nodes: ['redis://a:7000', 'redis://b:7001'], username: 'gw' });
    expect(cfg.store).not.toHaveProperty('url');
  });

  it('refuses a cluster without nodes, a node with a database or no port, mixed schemes, and a zero retention; never echoing a URL', () => {
    const secret = 'redis://user:hunter2@a:7000/3';
    const cases: Array<[string, string]> = [
      ['store:\n  kind: redis-cluster\n  nodes: []\n', 'store.nodes'],
      [`store:\n  kind: redis-cluster\n  nodes: [${secret}]\n`, 'store.nodes.0'],
      ['store:\n  kind: redis-cluster\n  nodes: [redis://a]\n', 'store.nodes.0'],
      ['store:\n  kind: redis-cluster\n  nodes: [redis://a:1, rediss://b:2]\n', 'store.nodes'],
      ['retention:\n  ledgerDays: 0\n', 'retention.ledgerDays'],
    ];
    for (const [yaml, where] of cases) {
      const problems = problemsOf(() => loadConfig({ path: file(yaml), env: {} }));
      expect(problems.some((p) => p.startsWith(`${where}:`)), `${yaml} → ${problems.join('; ')}`).toBe(true);
      expect(problems.join(' ')).not.toContain('hunter2');
    }
  });
});

describe('ConfigError lists every problem', () => {
  it('three independent schema mistakes yield three entries', () => {
    const path = file('log:\n  level: loud\nlimits:\n  maxRequestBytes: -1\nupstream:\n  baseUrl: ftp://x\n');
    const problems = problemsOf(() => loadConfig({ path, env: {} }));
    expect(problems).toHaveLength(3);
    expect(problems.some((p) => p.startsWith('log.level:'))).toBe(true);
    expect(problems.some((p) => p.startsWith('limits.maxRequestBytes:'))).toBe(true);
    expect(problems.some((p) => p.startsWith('upstream.baseUrl:'))).toBe(true);
  });

  it('an environment problem is listed with the file problems', () => {
    const problems = problemsOf(() => loadConfig({ path: file('log:\n  level: loud\n'), env: { GATEWAY_PORT: 'x' } }));
    expect(problems).toHaveLength(2);
    expect(problems[0]).toBe('GATEWAY_PORT: must be a port number');
  });

  // BUG: alias rules live in superRefine, which zod skips once any field fails
  // its own schema; a bad log level hides the alias/floor mistakes.
  it('a schema mistake does not hide alias-rule mistakes', () => {
    const embed = defaultModels('svc')[3]!;
    const raw = { ...withModels([chat({ alias: 'x-quick', pinned: 'x-quick-2026-08' }), { ...embed, maxTokensFloor: 5 }]), log: { level: 'loud' } };
    const problems = problemsOf(() => parseConfig(raw));
    expect(problems.some((p) => p.startsWith('log.level:'))).toBe(true);
    expect(problems.some((p) => p.includes('brand prefix'))).toBe(true);
    expect(problems.some((p) => p.includes('max_tokens floor'))).toBe(true);
  });
});

describe('alias rules', () => {
  it('aliases and pinned names need the brand prefix', () => {
    const problems = problemsOf(() => parseConfig(withModels([chat({ alias: 'x-quick', pinned: 'x-quick-2026-08' })])));
    expect(problems).toEqual([
      'models.0.alias: must start with "svc-" (the brand prefix)',
      'models.0.pinned: must start with "svc-" (the brand prefix)',
    ]);
  });

  it('pinned must be the alias followed by -YYYY-MM', () => {
    expect(problemsOf(() => parseConfig(withModels([chat({ pinned: 'svc-core-2026-08' })])))).toEqual([
      'models.0.pinned: must be the floating alias followed by -YYYY-MM',
    ]);
    for (const bad of ['svc-quick-2026-13', 'svc-quick-2026-00', 'svc-quick-26-08', 'svc-quick']) {
      expect(problemsOf(() => parseConfig(withModels([chat({ pinned: bad })]))).join()).toContain('models.0.pinned');
    }
  });

  it('duplicate aliases are refused', () => {
    const problems = problemsOf(() => parseConfig({ ...withModels([chat(), chat({ model: 'other' })]), billing: pricing('other') }));
    expect(problems).toEqual(['models.1.alias: duplicate alias', 'models.1.pinned: duplicate alias']);
  });

  it('an alias may not equal an internal model name', () => {
    const models = [chat(), chat({ alias: 'svc-core', pinned: 'svc-core-2026-08', model: 'svc-quick' })];
    const problems = problemsOf(() => parseConfig({ ...withModels(models), billing: pricing('svc-quick') }));
    expect(problems).toEqual(['models: an alias may not equal an internal model name']);
  });

  it('a max_tokens floor is allowed only on chat models', () => {
    const embed = defaultModels('svc')[3]!;
    expect(problemsOf(() => parseConfig(withModels([{ ...embed, maxTokensFloor: 10 }])))).toEqual([
      'models.0.maxTokensFloor: only chat models take a max_tokens floor',
    ]);
    expect(parseConfig(withModels([chat({ maxTokensFloor: 10 })])).models[0]?.maxTokensFloor).toBe(10);
  });
});

describe('model output caps and prices', () => {
  it('maxOutputTokens defaults to 4096; svc-deep gets 32768', () => {
    const cfg = parseConfig(defaultConfig('svc'));
    expect(cfg.models.map((m) => [m.alias, m.maxOutputTokens])).toEqual([
      ['svc-quick', 4096], ['svc-core', 4096], ['svc-deep', 32768], ['svc-embed', 4096],
    ]);
    const { maxOutputTokens: _dropped, ...noCap } = chat();
    expect(parseConfig(withModels([noCap as Model])).models[0]?.maxOutputTokens).toBe(4096);
  });

  it('refuses a models list whose internal model has no price', () => {
    expect(problemsOf(() => parseConfig(withModels([chat({ model: 'sim-new-1' })])))).toEqual([
      'billing.prices: the internal model sim-new-1 has no price',
    ]);
    // The pinned model needs a price too; one problem per model, sorted by name.
    expect(problemsOf(() => parseConfig(withModels([chat({ model: 'sim-b', pinnedModel: 'sim-a' })])))).toEqual([
      'billing.prices: the internal model sim-a has no price',
      'billing.prices: the internal model sim-b has no price',
    ]);
  });

  it('accepts the same list once the model is priced, and fills price defaults', () => {
    const cfg = parseConfig({ ...withModels([chat({ model: 'sim-new-1' })]), billing: pricing('sim-new-1') });
    expect(cfg.billing.prices['sim-new-1']).toEqual({ inputPerMillion: 1, outputPerMillion: 2, perInput: 0 });
    expect(cfg.billing.prices['sim-embed-1']).toEqual({ inputPerMillion: 0, outputPerMillion: 0, perInput: 20 });
  });
});

describe('readUpstreamKey', () => {
  const cfgWith = (apiKeyFile: string | null, apiKeyEnv: string | null = 'UPSTREAM_API_KEY') =>
    parseConfig({ ...defaultConfig('svc'), upstream: { baseUrl: 'http://127.0.0.1:8000/v1', apiKeyEnv, apiKeyFile } });

  it('the file wins over the environment and is trimmed', () => {
    const key = file('  sk-file\n');
    expect(readUpstreamKey(cfgWith(key), { UPSTREAM_API_KEY: 'sk-env' })).toBe('sk-file');
  });

  it('falls back to the trimmed environment variable', () => {
    expect(readUpstreamKey(cfgWith(null), { UPSTREAM_API_KEY: ' sk-env \n' })).toBe('sk-env');
  });

  it('is undefined when neither is set (or both are blank)', () => {
    expect(readUpstreamKey(cfgWith(null), {})).toBeUndefined();
    expect(readUpstreamKey(cfgWith(null, null), { UPSTREAM_API_KEY: 'sk' })).toBeUndefined();
    expect(readUpstreamKey(cfgWith(file('  \n')), {})).toBeUndefined();
    expect(readUpstreamKey(cfgWith(null), { UPSTREAM_API_KEY: '   ' })).toBeUndefined();
  });
});
