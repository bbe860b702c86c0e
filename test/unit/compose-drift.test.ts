// Drift check for the compose stack: the committed envoy/envoy.yaml must be
// exactly what `npx tsx sidecar/stack/compose-config.ts` renders from
// envoy/gateway.yaml, and docker-compose.yml must agree with both (Envoy image
// tag, service names used as host names, loopback-only admin ports).
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../sidecar/src/config/load.js';
import {
  COMPOSE_ENVOY_CONFIG,
  COMPOSE_GATEWAY_CONFIG,
  COMPOSE_SIDECAR_ADDRESS,
  renderComposeEnvoyConfig,
} from '../../sidecar/stack/compose-config.js';
import { ENVOY_VERSION } from '../../sidecar/stack/envoy-config.js';
import { REPO_ROOT } from '../../sidecar/stack/paths.js';

const REGEN_HINT = 'run `npx tsx sidecar/stack/compose-config.ts` and commit envoy/envoy.yaml';
const COMPOSE_FILE = join(REPO_ROOT, 'docker-compose.yml');

type Plain = Record<string, unknown>;
const isPlain = (v: unknown): v is Plain => typeof v === 'object' && v !== null && !Array.isArray(v);

interface Published {
  readonly hostIp: string | null;
  readonly published: string | null;
  readonly target: number;
}

/** A compose `ports` entry, short ("[ip:][host:]container[/proto]") or long syntax. */
function parsePort(entry: unknown): Published {
  if (isPlain(entry)) {
    return {
      hostIp: typeof entry.host_ip === 'string' ? entry.host_ip : null,
      published: entry.published === undefined ? null : String(entry.published),
      target: Number(entry.target),
    };
  }
  const spec = String(entry).replace(/\/(tcp|udp)$/, '');
  // IPv6 host addresses are bracketed: "[::1]:9901:9901".
  const m = /^(?:(\[[^\]]+\]|[^:]+):)?(?:([^:]*):)?([^:]+)$/.exec(spec);
  if (!m) throw new Error(`unparsable port mapping: ${String(entry)}`);
  const [, a, b, target] = m;
  // Two parts: "host:container"; three parts: "ip:host:container".
  const hostIp = b === undefined ? null : (a ?? null);
  const published = b === undefined ? (a ?? null) : b;
  return { hostIp: hostIp?.replace(/^\[|\]$/g, '') ?? null, published, target: Number(target) };
}

/** A compose `volumes` entry as { source, target }, short or long syntax. */
function parseVolume(entry: unknown): { source: string; target: string } {
  if (isPlain(entry)) return { source: String(entry.source), target: String(entry.target) };
  const [source = '', target = ''] = String(entry).split(':');
  return { source, target };
}

const normalizeSource = (s: string) => s.replace(/^\.\//, '');

function loadCompose(): { raw: string; services: Record<string, Plain> } {
  const raw = readFileSync(COMPOSE_FILE, 'utf8');
  const doc: unknown = parseYaml(raw);
  if (!isPlain(doc) || !isPlain(doc.services)) throw new Error('docker-compose.yml has no services mapping');
  const services: Record<string, Plain> = {};
  for (const [name, svc] of Object.entries(doc.services)) services[name] = isPlain(svc) ? svc : {};
  return { raw, services };
}

const portsOf = (svc: Plain | undefined): Published[] => (Array.isArray(svc?.ports) ? svc.ports.map(parsePort) : []);
const volumesOf = (svc: Plain | undefined) => (Array.isArray(svc?.volumes) ? svc.volumes.map(parseVolume) : []);

/** Host names (not IPs, not unix sockets) of every endpoint of every cluster in the Envoy bootstrap. */
function clusterHosts(envoyYaml: string): Map<string, string[]> {
  const doc: unknown = parseYaml(envoyYaml);
  const res = isPlain(doc) ? doc.static_resources : undefined;
  const clusters = isPlain(res) && Array.isArray(res.clusters) ? res.clusters : [];
  const out = new Map<string, string[]>();
  for (const c of clusters) {
    if (!isPlain(c) || !isPlain(c.load_assignment) || !Array.isArray(c.load_assignment.endpoints)) continue;
    const hosts: string[] = [];
    for (const e of c.load_assignment.endpoints) {
      for (const lb of isPlain(e) && Array.isArray(e.lb_endpoints) ? e.lb_endpoints : []) {
        const sa = isPlain(lb) && isPlain(lb.endpoint) && isPlain(lb.endpoint.address) ? lb.endpoint.address.socket_address : undefined;
        if (isPlain(sa) && typeof sa.address === 'string' && isIP(sa.address) === 0) hosts.push(sa.address);
      }
    }
    out.set(String(c.name), hosts);
  }
  return out;
}

describe('compose Envoy config (envoy/envoy.yaml)', () => {
  it('is byte-identical to a fresh render of envoy/gateway.yaml', () => {
    const committed = readFileSync(COMPOSE_ENVOY_CONFIG, 'utf8');
    expect(committed === renderComposeEnvoyConfig(), `envoy/envoy.yaml is out of date; ${REGEN_HINT}`).toBe(true);
  });

  it('reaches the sidecar, the provider and the account service by compose service name', () => {
    const hosts = clusterHosts(readFileSync(COMPOSE_ENVOY_CONFIG, 'utf8'));
    expect([...hosts.keys()].sort()).toEqual(['account', 'provider', 'sidecar']);
    expect(hosts.get('sidecar')).toEqual([COMPOSE_SIDECAR_ADDRESS.split(':')[0]]);
    expect(hosts.get('provider')).toEqual(['simulator']);
    expect(hosts.get('account')).toEqual(['account']);
  });
});

describe('docker-compose.yml', () => {
  const { raw, services } = loadCompose();
  const cfg = loadConfig({ path: COMPOSE_GATEWAY_CONFIG, env: {} });

  it(`runs the pinned Envoy image envoyproxy/envoy:v${ENVOY_VERSION}`, () => {
    expect(services.envoy?.image).toBe(`envoyproxy/envoy:v${ENVOY_VERSION}`);
    const tags = [...raw.matchAll(/envoyproxy\/envoy:(\S+)/g)].map((m) => m[1]);
    expect(tags).toEqual([`v${ENVOY_VERSION}`]);
  });

  it('mounts envoy/envoy.yaml into Envoy and envoy/gateway.yaml into the sidecar', () => {
    const envoyCmd = services.envoy?.command;
    expect(Array.isArray(envoyCmd) ? envoyCmd : []).toEqual(expect.arrayContaining(['-c', '/etc/envoy/envoy.yaml']));
    expect(volumesOf(services.envoy).map((v) => [normalizeSource(v.source), v.target])).toContainEqual(['envoy/envoy.yaml', '/etc/envoy/envoy.yaml']);

    const env = services.sidecar?.environment;
    const gatewayConfig = isPlain(env) ? env.GATEWAY_CONFIG : undefined;
    expect(typeof gatewayConfig).toBe('string');
    expect(volumesOf(services.sidecar).map((v) => [normalizeSource(v.source), v.target])).toContainEqual(['envoy/gateway.yaml', gatewayConfig]);
  });

  it('has a service for every host name the Envoy clusters and the sidecar store use', () => {
    const names = new Set<string>();
    for (const hosts of clusterHosts(renderComposeEnvoyConfig()).values()) hosts.forEach((h) => names.add(h));
    if (cfg.store.kind === 'redis') names.add(new URL(cfg.store.url).hostname);
    expect([...names].sort()).toEqual(['account', 'redis', 'sidecar', 'simulator']);
    for (const name of names) expect(Object.keys(services), `no compose service "${name}"`).toContain(name);
  });

  it('publishes the admin ports on 127.0.0.1 only, and only the gateway listener publicly', () => {
    const adminPorts: [string, number][] = [
      ['envoy', cfg.listen.envoyAdmin.port],
      ['sidecar', cfg.listen.admin.port],
    ];
    for (const [svc, port] of adminPorts) {
      const mappings = portsOf(services[svc]).filter((p) => p.target === port);
      expect(mappings.length, `${svc}:${port} is not published`).toBeGreaterThan(0);
      for (const p of mappings) expect(p.hostIp, `${svc}:${port} published beyond loopback`).toBe('127.0.0.1');
    }

    const publicPorts = Object.entries(services).flatMap(([name, svc]) =>
      portsOf(svc)
        .filter((p) => p.hostIp !== '127.0.0.1')
        .map((p) => `${name}:${p.target}`),
    );
    expect(publicPorts).toEqual([`envoy:${cfg.listen.gateway.port}`]);
  });
});
