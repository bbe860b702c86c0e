/**
 * A filter-less twin of the gateway's Envoy, for the benchmark baseline.
 *
 * Derived from buildEnvoyBootstrap()'s object so that the listener, the
 * HTTP connection manager settings (codec, timeouts, request ids, access log,
 * local replies, buffer limits) and the provider cluster stay identical to the
 * real gateway. What goes away is exactly what the gateway adds on top of a
 * plain proxy:
 *
 *   - every HTTP filter except the router (header_mutation, ext_authz, ext_proc);
 *   - every route that does not go to the provider cluster (sidecar direct
 *     responses, account routes, the catch-all 404); the provider routes keep
 *     their match, prefix_rewrite, host rewrite and timeouts;
 *   - every typed_per_filter_config (they name filters that no longer exist);
 *   - every cluster no kept route uses (the sidecar cluster, the account cluster).
 *
 * The listener and the admin interface move to the given ports, on the same hosts.
 */

type Obj = Record<string, unknown>;

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

function obj(v: unknown, what: string): Obj {
  if (!isObj(v)) throw new Error(`bareBootstrap: ${what} is not an object`);
  return v;
}

function arr(v: unknown, what: string): unknown[] {
  if (!Array.isArray(v)) throw new Error(`bareBootstrap: ${what} is not a list`);
  return v;
}

/** Removes every `typed_per_filter_config` key, at any depth. */
function dropPerFilterConfig(v: unknown): void {
  if (Array.isArray(v)) {
    for (const x of v) dropPerFilterConfig(x);
  } else if (isObj(v)) {
    delete v.typed_per_filter_config;
    for (const x of Object.values(v)) dropPerFilterConfig(x);
  }
}

const ROUTER = 'envoy.filters.http.router';
const HCM = 'envoy.filters.network.http_connection_manager';
const PROVIDER_CLUSTER = 'provider';

/**
 * A copy of a gateway bootstrap for a second Envoy on the same box: the node
 * gets `suffix`, the listener and the admin interface move to the given ports.
 */
export function relocatedBootstrap(full: Record<string, unknown>, opts: { suffix: string; listenPort: number; adminPort: number }): Record<string, unknown> {
  const b = structuredClone(full);
  const node = b.node;
  if (isObj(node)) {
    node.id = `${String(node.id ?? 'gateway')}-${opts.suffix}`;
    node.cluster = `${String(node.cluster ?? 'gateway')}-${opts.suffix}`;
  }
  const admin = obj(b.admin, 'admin');
  obj(obj(admin.address, 'admin.address').socket_address, 'admin.address.socket_address').port_value = opts.adminPort;
  obj(obj(onlyListener(b).address, 'listener.address').socket_address, 'listener.address.socket_address').port_value = opts.listenPort;
  return b;
}

function onlyListener(b: Obj): Obj {
  const listeners = arr(obj(b.static_resources, 'static_resources').listeners, 'static_resources.listeners');
  if (listeners.length !== 1) throw new Error(`bareBootstrap: expected one listener, got ${listeners.length}`);
  return obj(listeners[0], 'listener');
}

export function bareBootstrap(full: Record<string, unknown>, opts: { listenPort: number; adminPort: number }): Record<string, unknown> {
  const b = relocatedBootstrap(full, { ...opts, suffix: 'bare' });
  const statics = obj(b.static_resources, 'static_resources');
  const listener = onlyListener(b);

  const usedClusters = new Set<string>();
  for (const chain of arr(listener.filter_chains, 'listener.filter_chains')) {
    for (const f of arr(obj(chain, 'filter chain').filters, 'filter_chains[].filters')) {
      const filter = obj(f, 'network filter');
      if (filter.name !== HCM) continue;
      const hcm = obj(filter.typed_config, 'http_connection_manager.typed_config');

      const router = arr(hcm.http_filters, 'http_filters').find((h) => isObj(h) && h.name === ROUTER);
      if (!router) throw new Error('bareBootstrap: no router filter in the full bootstrap');
      hcm.http_filters = [router];

      const routeConfig = obj(hcm.route_config, 'route_config');
      for (const vh of arr(routeConfig.virtual_hosts, 'route_config.virtual_hosts')) {
        const vhost = obj(vh, 'virtual host');
        const kept = arr(vhost.routes, 'virtual_host.routes').filter((r) => isObj(r) && isObj(r.route) && r.route.cluster === PROVIDER_CLUSTER);
        if (kept.length === 0) throw new Error('bareBootstrap: no route to the provider cluster');
        vhost.routes = kept;
        usedClusters.add(PROVIDER_CLUSTER);
      }
    }
  }
  if (!usedClusters.has(PROVIDER_CLUSTER)) throw new Error('bareBootstrap: no http_connection_manager with provider routes');

  statics.clusters = arr(statics.clusters, 'static_resources.clusters').filter((c) => isObj(c) && typeof c.name === 'string' && usedClusters.has(c.name));
  if ((statics.clusters as unknown[]).length === 0) throw new Error(`bareBootstrap: no "${PROVIDER_CLUSTER}" cluster in the full bootstrap`);

  dropPerFilterConfig(b);
  return b;
}
