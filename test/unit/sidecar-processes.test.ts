import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadConfig, mergeConfig, parseConfig } from '../../sidecar/src/config/load.js';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { buildEnvoyBootstrap } from '../../sidecar/stack/envoy-config.js';
import { renderFromEnvironment } from '../../sidecar/stack/render-envoy.js';
import { assertSidecarCount, nthSidecarAddress } from '../../sidecar/stack/stack.js';
import { sidecarProcesses } from '../../sidecar/stack/start.js';

/** Several sidecar processes behind Envoy's one sidecar cluster (issue 11, "Cores"). */
const config = (over: Record<string, unknown> = {}) => parseConfig(mergeConfig(defaultConfig('svc'), over));
const redis = { store: { kind: 'redis', url: 'redis://127.0.0.1:6390' } };

type Cluster = { name: string; type: string; lb_policy?: string; load_assignment: { endpoints: Array<{ lb_endpoints: Array<{ endpoint: { address: unknown } }> }> } };
const clusterOf = (bootstrap: Record<string, unknown>, name: string) =>
  ((bootstrap.static_resources as { clusters: Cluster[] }).clusters.find((c) => c.name === name) as Cluster);
const addressesOf = (c: Cluster) => c.load_assignment.endpoints.flatMap((e) => e.lb_endpoints.map((l) => l.endpoint.address));

describe('the sidecar cluster', () => {
  it('one endpoint per process, balanced by least requests; sockets are static', () => {
    const c = clusterOf(buildEnvoyBootstrap(config(), { sidecarAddresses: ['unix:/run/a.sock', 'unix:/run/b.sock'] }), 'sidecar');
    expect(addressesOf(c)).toEqual([{ pipe: { path: '/run/a.sock' } }, { pipe: { path: '/run/b.sock' } }]);
    expect(c.lb_policy).toBe('LEAST_REQUEST');
    expect(c.type).toBe('STATIC');
  });

  it('without a list: the one configured address (or sidecarAddress)', () => {
    expect(addressesOf(clusterOf(buildEnvoyBootstrap(config()), 'sidecar'))).toEqual([{ socket_address: { address: '127.0.0.1', port_value: 50051 } }]);
    expect(addressesOf(clusterOf(buildEnvoyBootstrap(config(), { sidecarAddress: 'unix:/s.sock' }), 'sidecar'))).toEqual([{ pipe: { path: '/s.sock' } }]);
  });

  it('a host name (compose service, every replica) is resolved by DNS', () => {
    const c = clusterOf(buildEnvoyBootstrap(config(), { sidecarAddresses: ['sidecar:50051'] }), 'sidecar');
    expect(c.type).toBe('STRICT_DNS');
  });

  it('the renderer takes ENVOY_SIDECAR_ADDRESS as a comma-separated list', () => {
    const yaml = renderFromEnvironment({ ENVOY_SIDECAR_ADDRESS: 'unix:/run/a.sock, unix:/run/b.sock' });
    const c = clusterOf(parse(yaml) as Record<string, unknown>, 'sidecar');
    expect(addressesOf(c)).toEqual([{ pipe: { path: '/run/a.sock' } }, { pipe: { path: '/run/b.sock' } }]);
  });
});

describe('the local stack with several sidecar processes', () => {
  it('refuses more than one on the memory store, saying why and what to use', () => {
    expect(() => assertSidecarCount(config(), 2)).toThrow(/2 need a shared store.*memory store lives inside one process.*REDIS_URL/);
    expect(() => assertSidecarCount(config(), 1)).not.toThrow();
    expect(() => assertSidecarCount(config(redis), 4)).not.toThrow();
    for (const bad of [0, 1.5, NaN, 65]) expect(() => assertSidecarCount(config(redis), bad)).toThrow(/not a whole number from 1 to 64/);
  });

  it('SIDECAR_PROCESSES: unset is 1; anything else is checked by the stack', () => {
    expect(sidecarProcesses({})).toBe(1);
    expect(sidecarProcesses({ SIDECAR_PROCESSES: ' 3 ' })).toBe(3);
    expect(() => sidecarProcesses({ SIDECAR_PROCESSES: 'two' })).toThrow(/^SIDECAR_PROCESSES: must be a whole number/);
    expect(() => assertSidecarCount(config(redis), sidecarProcesses({ SIDECAR_PROCESSES: '0' }))).toThrow(/0 is not a whole number from 1 to 64/);
  });

  it('each process its own gRPC address', () => {
    expect(nthSidecarAddress('unix:/run/x/sidecar.sock', 0)).toBe('unix:/run/x/sidecar.sock');
    expect(nthSidecarAddress('unix:/run/x/sidecar.sock', 1)).toBe('unix:/run/x/sidecar-2.sock');
    expect(nthSidecarAddress('unix:/run/x.d/sidecar', 2)).toBe('unix:/run/x.d/sidecar-3');
    expect(nthSidecarAddress('127.0.0.1:50051', 1)).toBe('127.0.0.1:50052');
  });

  it('SETTLEMENT_JOURNAL gives a process its own journal file', () => {
    expect(loadConfig({ env: { SETTLEMENT_JOURNAL: '/var/lib/gw/journal-2.jsonl' } }).billing.journalPath).toBe('/var/lib/gw/journal-2.jsonl');
  });
});
