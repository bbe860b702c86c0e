// The compose stack, rendered and checked as `docker compose config` would
// (no Docker daemon runs here): docker-compose.yml with its ${VAR:-default}
// interpolation and YAML merge keys resolved, validated against the Compose
// specification's JSON schema (test/schemas/compose-spec.json, vendored), and
// Envoy's bootstrap rendered exactly as the envoy-config service renders it at
// container start, from envoy/gateway.yaml and the same environment the
// sidecar gets. The two must agree: service names, ports, mounts, health.
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import { parse as parseYaml } from 'yaml';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../sidecar/src/config/load.js';
import { ENVOY_VERSION } from '../../sidecar/stack/envoy-config.js';
import { renderFromEnvironment } from '../../sidecar/stack/render-envoy.js';
import { REPO_ROOT } from '../../sidecar/stack/paths.js';
import { requireEnvoy } from '../../sidecar/stack/envoy-bin.js';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { stringify } from 'yaml';

const COMPOSE_FILE = join(REPO_ROOT, 'docker-compose.yml');
const SCHEMA_FILE = join(REPO_ROOT, 'test', 'schemas', 'compose-spec.json');

type Plain = Record<string, any>;
const isPlain = (v: unknown): v is Plain => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Compose interpolation of ${VAR}, ${VAR:-default}, ${VAR-default} and $$ in every string. */
function interpolate(value: unknown, env: Readonly<Record<string, string | undefined>>): unknown {
  if (typeof value === 'string') {
    return value.replace(/\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}/g, (all, name: string | undefined, op: string | undefined, dflt: string | undefined) => {
      if (all === '$$') return '$';
      const v = env[name as string];
      if (op === ':-') return v === undefined || v === '' ? (dflt ?? '') : v;
      if (op === '-') return v === undefined ? (dflt ?? '') : v;
      return v ?? '';
    });
  }
  if (Array.isArray(value)) return value.map((v) => interpolate(v, env));
  if (isPlain(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, interpolate(v, env)]));
  return value;
}

/** docker-compose.yml as `docker compose config` sees it under this environment. */
function renderCompose(env: Readonly<Record<string, string | undefined>> = {}): Plain {
  const doc = parseYaml(readFileSync(COMPOSE_FILE, 'utf8'), { merge: true });
  return interpolate(doc, env) as Plain;
}

interface Published {
  readonly hostIp: string | null;
  readonly published: string | null;
  readonly target: number;
}

/** A compose `ports` entry, short ("[ip:][host:]container[/proto]") or long syntax. */
function parsePort(entry: unknown): Published {
  if (isPlain(entry)) return { hostIp: entry.host_ip ?? null, published: entry.published === undefined ? null : String(entry.published), target: Number(entry.target) };
  const spec = String(entry).replace(/\/(tcp|udp)$/, '');
  const m = /^(?:(\[[^\]]+\]|[^:]+):)?(?:([^:]*):)?([^:]+)$/.exec(spec);
  if (!m) throw new Error(`unparsable port mapping: ${String(entry)}`);
  const [, a, b, target] = m;
  const hostIp = b === undefined ? null : (a ?? null);
  const published = b === undefined ? (a ?? null) : b;
  return { hostIp: hostIp?.replace(/^\[|\]$/g, '') ?? null, published, target: Number(target) };
}

function parseVolume(entry: unknown): { source: string; target: string; readOnly: boolean } {
  if (isPlain(entry)) return { source: String(entry.source), target: String(entry.target), readOnly: entry.read_only === true };
  const [source = '', target = '', mode = ''] = String(entry).split(':');
  return { source: source.replace(/^\.\//, ''), target, readOnly: mode.split(',').includes('ro') };
}

const portsOf = (svc: Plain | undefined): Published[] => (Array.isArray(svc?.ports) ? svc.ports.map(parsePort) : []);
const volumesOf = (svc: Plain | undefined) => (Array.isArray(svc?.volumes) ? svc.volumes.map(parseVolume) : []);

/** The environment a service's process gets: its `environment`, values from the host for empty entries. */
function serviceEnv(svc: Plain, host: Readonly<Record<string, string | undefined>>): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(svc.environment ?? {})) out[k] = v === null || v === '' ? host[k] : String(v);
  return out;
}

/** Renders Envoy's bootstrap the way the envoy-config service does, with its mounts mapped to the repository. */
function renderEnvoyLikeCompose(compose: Plain, host: Readonly<Record<string, string | undefined>> = {}): Plain {
  const svc = compose.services['envoy-config'];
  const env = serviceEnv(svc, host);
  const mount = volumesOf(svc).find((v) => v.target === env.GATEWAY_CONFIG);
  if (!mount) throw new Error('envoy-config does not mount its GATEWAY_CONFIG');
  return parseYaml(renderFromEnvironment({ ...env, GATEWAY_CONFIG: join(REPO_ROOT, mount.source) })) as Plain;
}

/** Host names (not IPs, not unix sockets) of every endpoint of every cluster in an Envoy bootstrap. */
function clusterHosts(bootstrap: Plain): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const c of bootstrap.static_resources.clusters as Plain[]) {
    const hosts: string[] = [];
    for (const e of c.load_assignment.endpoints) {
      for (const lb of e.lb_endpoints) {
        const sa = lb.endpoint.address.socket_address;
        if (isPlain(sa) && isIP(sa.address) === 0) hosts.push(sa.address);
      }
    }
    out.set(String(c.name), hosts);
  }
  return out;
}

const compose = renderCompose();
const services = compose.services as Record<string, Plain>;

describe('docker-compose.yml against the Compose specification', () => {
  const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
  // The schema names its draft (07) by an https URL Ajv does not know; Ajv's default draft is 07.
  const { $schema: _draft, ...schema } = JSON.parse(readFileSync(SCHEMA_FILE, 'utf8'));
  const validate = ajv.compile(schema);

  it('is valid, rendered with defaults and with overrides', () => {
    for (const env of [{}, { GATEWAY_PORT: '9090', UPSTREAM_URL: 'https://api.provider.example/v1', LOG_LEVEL: 'debug' }]) {
      const ok = validate(renderCompose(env));
      expect(ok, JSON.stringify(validate.errors, null, 1)).toBe(true);
    }
  });

  it('the schema check can fail: an unknown service key or a bad depends_on condition is refused', () => {
    const bad = renderCompose();
    bad.services.envoy.depends_on.sidecar.condition = 'service_ready';
    bad.services.redis.restart_policy = 'always';
    expect(validate(bad)).toBe(false);
  });
});

describe('Envoy rendered at start from the sidecar configuration', () => {
  const envoy = renderEnvoyLikeCompose(compose);

  it('the envoy-config step writes where Envoy reads, through a shared volume; Envoy starts after it completed', () => {
    const out = services['envoy-config']?.command.at(-1);
    expect(services.envoy?.command).toEqual(expect.arrayContaining(['-c', out]));
    const written = volumesOf(services['envoy-config']).find((v) => out.startsWith(`${v.target}/`));
    const read = volumesOf(services.envoy).find((v) => out.startsWith(`${v.target}/`));
    expect(written?.source).toBe(read?.source);
    expect(compose.volumes).toHaveProperty(read?.source as string);
    expect(read?.readOnly).toBe(true);
    expect(services.envoy?.depends_on['envoy-config']).toEqual({ condition: 'service_completed_successfully' });
  });

  it('the sidecar and the renderer read the same file with the same environment', () => {
    const sidecarEnv = serviceEnv(services.sidecar as Plain, {});
    const renderEnv = serviceEnv(services['envoy-config'] as Plain, {});
    for (const [k, v] of Object.entries(renderEnv)) if (k !== 'ENVOY_SIDECAR_ADDRESS') expect(sidecarEnv[k], k).toBe(v);
    for (const k of ['GATEWAY_CONFIG', 'GATEWAY_PORT', 'UPSTREAM_URL', 'ACCOUNT_SERVICE_URL']) expect(Object.keys(renderEnv)).toContain(k);
    const gatewayYaml = (svc: Plain) => volumesOf(svc).find((v) => v.target === serviceEnv(svc, {}).GATEWAY_CONFIG)?.source;
    expect(gatewayYaml(services.sidecar as Plain)).toBe('envoy/gateway.yaml');
    expect(gatewayYaml(services['envoy-config'] as Plain)).toBe('envoy/gateway.yaml');
  });

  it('reaches the sidecar (gRPC and, for /healthz, its operator API), the provider and the account service by compose service name', () => {
    const hosts = clusterHosts(envoy);
    expect([...hosts.keys()].sort()).toEqual(['account', 'provider', 'sidecar', 'sidecar_admin']);
    expect(hosts.get('sidecar')).toEqual(['sidecar']);
    expect(hosts.get('sidecar_admin')).toEqual(['sidecar']);
    expect(hosts.get('provider')).toEqual(['simulator']);
    expect(hosts.get('account')).toEqual(['account']);
    const cfg = loadConfig({ path: join(REPO_ROOT, 'envoy', 'gateway.yaml'), env: {} });
    const names = new Set([...clusterHosts(envoy).values()].flat());
    if (cfg.store.kind === 'redis') names.add(new URL(cfg.store.url).hostname);
    for (const name of names) expect(Object.keys(services), `no compose service "${name}"`).toContain(name);
  });

  it('is a bootstrap the pinned Envoy accepts (envoy --mode validate)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'compose-envoy-'));
    try {
      const file = join(dir, 'envoy.yaml');
      writeFileSync(file, stringify(envoy));
      const out = execFileSync(requireEnvoy(), ['--mode', 'validate', '-c', file, '--use-dynamic-base-id'], { encoding: 'utf8' });
      expect(out).toMatch(/OK/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('an override in the environment reaches Envoy and the published port alike', () => {
    const host = { GATEWAY_PORT: '9090', UPSTREAM_URL: 'https://api.provider.example/v1' };
    const c = renderCompose(host);
    const e = renderEnvoyLikeCompose(c, host);
    expect(e.static_resources.listeners[0].address.socket_address.port_value).toBe(9090);
    expect(clusterHosts(e).get('provider')).toEqual(['api.provider.example']);
    expect(portsOf(c.services.envoy)).toContainEqual({ hostIp: null, published: '9090', target: 9090 });
    expect(serviceEnv(c.services.sidecar, host).UPSTREAM_URL).toBe(host.UPSTREAM_URL);
  });
});

describe('docker-compose.yml services', () => {
  const cfg = loadConfig({ path: join(REPO_ROOT, 'envoy', 'gateway.yaml'), env: {} });

  it(`runs the pinned Envoy image envoyproxy/envoy:v${ENVOY_VERSION}`, () => {
    expect(services.envoy?.image).toBe(`envoyproxy/envoy:v${ENVOY_VERSION}`);
  });

  it('every long-running service has a health check, and every dependency waits for health (or completion)', () => {
    for (const [name, svc] of Object.entries(services)) {
      if (name === 'envoy-config') {
        expect(svc.restart).toBe('no');
        continue;
      }
      expect(svc.healthcheck?.test, `${name} has no health check`).toBeDefined();
      for (const [dep, cond] of Object.entries(svc.depends_on ?? {})) {
        expect((cond as Plain).condition, `${name} → ${dep}`).toBe(dep === 'envoy-config' ? 'service_completed_successfully' : 'service_healthy');
      }
    }
    expect(Object.keys(services.envoy?.depends_on ?? {}).sort()).toEqual(['account', 'envoy-config', 'sidecar', 'simulator']);
    expect(Object.keys(services.sidecar?.depends_on ?? {})).toEqual(['redis']);
    // The sidecar is healthy only when ready (its stores reachable), not merely alive.
    expect(JSON.stringify(services.sidecar?.healthcheck.test)).toContain('/readyz');
    expect(JSON.stringify(services.envoy?.healthcheck.test)).toContain('/ready');
  });

  it('Redis keeps money on disk: append-only file with an fsync policy', () => {
    expect(services.redis?.command).toEqual(expect.arrayContaining(['--appendonly', 'yes', '--appendfsync']));
  });

  it('publishes the admin ports on 127.0.0.1 only, and only the gateway listener publicly', () => {
    for (const [svc, port] of [['envoy', cfg.listen.envoyAdmin.port], ['sidecar', cfg.listen.admin.port]] as const) {
      const mappings = portsOf(services[svc]).filter((p) => p.target === port);
      expect(mappings.length, `${svc}:${port} is not published`).toBeGreaterThan(0);
      for (const p of mappings) expect(p.hostIp, `${svc}:${port} published beyond loopback`).toBe('127.0.0.1');
    }
    const publicPorts = Object.entries(services).flatMap(([name, svc]) => portsOf(svc).filter((p) => p.hostIp !== '127.0.0.1').map((p) => `${name}:${p.target}`));
    expect(publicPorts).toEqual([`envoy:${cfg.listen.gateway.port}`]);
  });
});
