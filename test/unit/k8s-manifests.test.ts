// The Kubernetes manifests (deploy/k8s: Kustomize base + production overlay),
// rendered here (no kustomize binary is available from npm, PyPI or Debian on
// this machine) by a small, faithful subset of Kustomize — resources,
// namespace, labels, images, replicas and strategic-merge patches (maps merge,
// lists of named items merge by name, null deletes) — then every object is
// validated against the Kubernetes OpenAPI schemas shipped in the npm package
// kubernetes-models, and checked for what the deployment must guarantee.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parse as parseYaml, parseAllDocuments, stringify } from 'yaml';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../sidecar/src/config/load.js';
import { renderFromEnvironment } from '../../sidecar/stack/render-envoy.js';
import { requireEnvoy } from '../../sidecar/stack/envoy-bin.js';
import { REPO_ROOT } from '../../sidecar/stack/paths.js';

type Plain = Record<string, any>;
const isPlain = (v: unknown): v is Plain => typeof v === 'object' && v !== null && !Array.isArray(v);
const K8S = join(REPO_ROOT, 'deploy', 'k8s');

/** Strategic merge for the fields these manifests patch: maps merge, named lists merge by name, null deletes. */
export function strategicMerge(base: unknown, patch: unknown): unknown {
  if (isPlain(base) && isPlain(patch)) {
    const out: Plain = { ...base };
    for (const [k, v] of Object.entries(patch)) {
      if (v === null) delete out[k];
      else out[k] = k in out ? strategicMerge(out[k], v) : v;
    }
    return out;
  }
  if (Array.isArray(base) && Array.isArray(patch) && [...base, ...patch].every((x) => isPlain(x) && typeof x.name === 'string')) {
    const out = base.map((x) => ({ ...x }));
    for (const p of patch) {
      const i = out.findIndex((x) => x.name === p.name);
      if (i >= 0) out[i] = strategicMerge(out[i], p) as Plain;
      else out.push(p);
    }
    return out;
  }
  return patch;
}

const CLUSTER_SCOPED = new Set(['Namespace', 'ClusterRole', 'ClusterRoleBinding']);
const podSpecOf = (o: Plain): Plain | undefined => o.spec?.template?.spec;

/** `kustomize build DIR` for the features used in deploy/k8s. */
export function kustomize(dir: string): Plain[] {
  const k = parseYaml(readFileSync(join(dir, 'kustomization.yaml'), 'utf8')) as Plain;
  const known = new Set(['apiVersion', 'kind', 'resources', 'namespace', 'labels', 'images', 'replicas', 'patches']);
  for (const key of Object.keys(k)) if (!known.has(key)) throw new Error(`${dir}: kustomization field ${key} is not rendered by this test`);
  let objs: Plain[] = [];
  for (const r of k.resources ?? []) {
    const p = join(dir, r);
    if (statSync(p).isDirectory()) objs.push(...kustomize(p));
    else for (const d of parseAllDocuments(readFileSync(p, 'utf8'))) if (d.contents) objs.push(d.toJSON() as Plain);
  }
  for (const patch of k.patches ?? []) {
    const body = parseYaml(readFileSync(join(dir, patch.path), 'utf8')) as Plain;
    const i = objs.findIndex((o) => o.kind === body.kind && o.metadata.name === body.metadata.name);
    if (i < 0) throw new Error(`patch ${patch.path} matches nothing`);
    objs[i] = strategicMerge(objs[i], body) as Plain;
  }
  for (const r of k.replicas ?? []) {
    const o = objs.find((x) => x.metadata.name === r.name && x.spec?.replicas !== undefined);
    if (!o) throw new Error(`replicas: no ${r.name}`);
    o.spec.replicas = r.count;
  }
  for (const img of k.images ?? []) {
    for (const o of objs) {
      for (const c of [...(podSpecOf(o)?.containers ?? []), ...(podSpecOf(o)?.initContainers ?? [])]) {
        if (c.image.split(':')[0] === img.name) c.image = `${img.newName ?? img.name}:${img.newTag ?? 'latest'}`;
      }
    }
  }
  for (const l of k.labels ?? []) for (const o of objs) o.metadata.labels = { ...(o.metadata.labels ?? {}), ...l.pairs };
  if (k.namespace) for (const o of objs) if (!CLUSTER_SCOPED.has(o.kind)) o.metadata.namespace = k.namespace;
  objs = JSON.parse(JSON.stringify(objs));
  return objs;
}

/** Validates one object with its kubernetes-models class (throws with the schema's message). */
async function validateK8s(o: Plain): Promise<void> {
  const [group, version] = String(o.apiVersion).includes('/') ? String(o.apiVersion).split('/') : [null, o.apiVersion];
  const mod: Plain = await import(group ? `kubernetes-models/${group}/${version}` : `kubernetes-models/${version}`);
  const Cls = mod[o.kind];
  if (!Cls) throw new Error(`no schema for ${o.apiVersion} ${o.kind}`);
  new Cls(o).validate();
}

const temps = mkdtempSync(join(tmpdir(), 'k8s-cfg-'));
afterAll(() => rmSync(temps, { recursive: true, force: true }));
const writeTemp = (text: string): string => {
  const file = join(mkdtempSync(join(temps, 'c-')), 'gateway.yaml');
  writeFileSync(file, text);
  return file;
};

const base = kustomize(join(K8S, 'base'));
const prod = kustomize(join(K8S, 'overlays', 'production'));
const find = (objs: Plain[], kind: string, name: string): Plain => {
  const o = objs.find((x) => x.kind === kind && x.metadata.name === name);
  if (!o) throw new Error(`no ${kind} ${name}`);
  return o;
};

describe('Kubernetes manifests: schemas', () => {
  for (const [name, objs] of [['base', base], ['production', prod]] as const) {
    it(`${name}: every object is valid against the Kubernetes schemas`, async () => {
      expect(objs.length).toBeGreaterThan(10);
      for (const o of objs) await expect(validateK8s(o), `${o.kind} ${o.metadata.name}`).resolves.toBeUndefined();
    });
  }

  it('the validation can fail: a port that is not a number, a Deployment without a selector', async () => {
    const bad = structuredClone(find(base, 'Deployment', 'gateway'));
    bad.spec.template.spec.containers[0].ports[0].containerPort = 'eighty';
    await expect(validateK8s(bad)).rejects.toThrow(/containerPort/);
    const noSelector = structuredClone(find(base, 'Deployment', 'account'));
    delete noSelector.spec.selector;
    await expect(validateK8s(noSelector)).rejects.toThrow(/selector/);
  });
});

/** A Kubernetes memory quantity (Ki, Mi, Gi or plain bytes) in bytes. */
function bytesOf(quantity: string): number {
  const m = /^(\d+)(Ki|Mi|Gi)?$/.exec(quantity);
  if (!m) throw new Error(`unexpected memory quantity ${quantity}`);
  return Number(m[1]) * (m[2] === 'Gi' ? 2 ** 30 : m[2] === 'Mi' ? 2 ** 20 : m[2] === 'Ki' ? 2 ** 10 : 1);
}

describe('Kubernetes manifests: what the deployment guarantees', () => {
  const dep = find(prod, 'Deployment', 'gateway');
  const pod = dep.spec.template.spec as Plain;
  const container = (n: string) => pod.containers.find((c: Plain) => c.name === n) as Plain;
  const configMap = find(prod, 'ConfigMap', 'gateway-config');
  const envMap = find(prod, 'ConfigMap', 'gateway-env');

  it('the production overlay: namespace, pinned image, three replicas, a client-address-keeping load balancer', () => {
    for (const o of prod) expect(o.metadata.namespace).toBe('svc-gateway');
    expect(container('sidecar').image).toBe('registry.example.com/svc-gateway-node:0.1.0');
    expect(pod.initContainers[0].image).toBe('registry.example.com/svc-gateway-node:0.1.0');
    expect(dep.spec.replicas).toBe(3);
    expect(find(prod, 'Service', 'gateway').spec).toMatchObject({ type: 'LoadBalancer', externalTrafficPolicy: 'Local' });
    expect(find(prod, 'PodDisruptionBudget', 'gateway').spec).toEqual({ minAvailable: 2, selector: dep.spec.selector });
    expect(find(prod, 'HorizontalPodAutoscaler', 'gateway').spec).toMatchObject({ minReplicas: 3, scaleTargetRef: { kind: 'Deployment', name: 'gateway' } });
    expect(container('sidecar').resources.requests.cpu).toBe('1');
  });

  it('Envoy and the sidecar share one Pod and talk over a Unix socket on a shared emptyDir', () => {
    const cfg = parseYaml(configMap.data['gateway.yaml']) as Plain;
    const socket = String(cfg.listen.sidecarGrpc);
    expect(socket).toMatch(/^unix:\//);
    const dir = dirname(socket.slice('unix:'.length));
    const mountOf = (c: Plain) => c.volumeMounts.find((m: Plain) => m.mountPath === dir)?.name;
    expect(mountOf(container('sidecar'))).toBeDefined();
    expect(mountOf(container('envoy'))).toBe(mountOf(container('sidecar')));
    expect(pod.volumes.find((v: Plain) => v.name === mountOf(container('envoy'))).emptyDir).toBeDefined();
    // No gRPC port anywhere: only Envoy (same Pod) reaches the sidecar.
    expect(container('sidecar').ports.map((p: Plain) => p.containerPort)).toEqual([cfg.listen.admin.port]);
    expect(container('sidecar').securityContext).toMatchObject({ readOnlyRootFilesystem: true });
    expect(pod.securityContext.runAsUser).toBeDefined(); // both containers: one user, so both may use the socket
  });

  it("Envoy's bootstrap is rendered by an init container from the sidecar's own configuration and environment; the pinned Envoy accepts it", () => {
    const init = pod.initContainers[0] as Plain;
    expect(init.command.join(' ')).toContain('sidecar/stack/render-envoy.ts');
    expect(init.envFrom).toEqual(container('sidecar').envFrom);
    const out = init.command.at(-1) as string;
    expect(container('envoy').args).toEqual(expect.arrayContaining(['-c', out]));
    const shared = (c: Plain) => c.volumeMounts.find((m: Plain) => out.startsWith(`${m.mountPath}/`))?.name;
    expect(shared(init)).toBe(shared(container('envoy')));

    // Render as the init container would: the ConfigMap's file, the Pod's environment.
    const dir = mkdtempSync(join(tmpdir(), 'k8s-envoy-'));
    try {
      const file = join(dir, 'gateway.yaml');
      writeFileSync(file, configMap.data['gateway.yaml']);
      const env = { ...envMap.data, GATEWAY_CONFIG: file, REDIS_URL: 'redis://redis:6379', UPSTREAM_API_KEY_FILE: '', IDENTITY_JWKS_FILE: '' };
      const envoy = parseYaml(renderFromEnvironment(env)) as Plain;
      const sidecarCluster = envoy.static_resources.clusters.find((c: Plain) => c.name === 'sidecar');
      const cfg = loadConfig({ path: file, env: {} });
      expect(sidecarCluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.pipe.path).toBe(cfg.listen.sidecarGrpc.slice('unix:'.length));
      expect(envoy.static_resources.clusters.find((c: Plain) => c.name === 'provider').load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address).toBe(new URL(envMap.data.UPSTREAM_URL).hostname);
      // The overload manager sheds load before the kubelet's memory limit kills Envoy.
      const heap = envoy.overload_manager.resource_monitors.find((m: Plain) => m.name === 'envoy.resource_monitors.fixed_heap').typed_config.max_heap_size_bytes;
      expect(heap).toBe(cfg.limits.envoyHeapBytes);
      expect(heap).toBeLessThan(bytesOf(container('envoy').resources.limits.memory));
      const rendered = join(dir, 'envoy.yaml');
      writeFileSync(rendered, stringify(envoy));
      expect(execFileSync(requireEnvoy(), ['--mode', 'validate', '-c', rendered, '--use-dynamic-base-id'], { encoding: 'utf8' })).toMatch(/OK/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('probes: the sidecar on /readyz (and /healthz), Envoy on /ready', () => {
    expect(container('sidecar').readinessProbe.httpGet.path).toBe('/readyz');
    expect(container('sidecar').livenessProbe.httpGet.path).toBe('/healthz');
    expect(container('envoy').readinessProbe.httpGet.path).toBe('/ready');
    expect(find(prod, 'Deployment', 'account').spec.template.spec.containers[0].readinessProbe).toBeDefined();
    expect(find(prod, 'StatefulSet', 'redis').spec.template.spec.containers[0].readinessProbe).toBeDefined();
  });

  it("shutdown: Envoy drains and outlives the sidecar's drain (shutdown.drainSeconds), all within the grace period", () => {
    const envoyHook = container('envoy').lifecycle.preStop.exec.command.join(' ');
    expect(envoyHook).toContain('/drain_listeners?graceful');
    const envoyWait = Number(container('envoy').env.find((e: Plain) => e.name === 'STREAM_DRAIN_SECONDS').value);
    const sidecarPreStop = Number(container('sidecar').lifecycle.preStop.exec.command.at(-1));
    const drainSeconds = loadConfig({ path: writeTemp(configMap.data['gateway.yaml']), env: {} }).shutdown.drainSeconds;
    expect(drainSeconds).toBeGreaterThan(0);
    // Envoy stays up while the sidecar's exchanges in flight end.
    expect(envoyWait).toBeGreaterThanOrEqual(sidecarPreStop + drainSeconds);
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThan(envoyWait);
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThan(sidecarPreStop + drainSeconds + 10); // settlements after the deadline
  });

  it('NetworkPolicy: only gateway Pods and the account service reach Redis; only gateway Pods reach the account service', () => {
    const redisPolicy = find(prod, 'NetworkPolicy', 'redis');
    const fromRedis = redisPolicy.spec.ingress.flatMap((r: Plain) => r.from.map((f: Plain) => f.podSelector.matchLabels['app.kubernetes.io/name'])).sort();
    expect(fromRedis).toEqual(['account', 'gateway']);
    expect(redisPolicy.spec.podSelector.matchLabels).toEqual(find(prod, 'StatefulSet', 'redis').spec.selector.matchLabels);
    const account = find(prod, 'NetworkPolicy', 'account');
    expect(account.spec.ingress.flatMap((r: Plain) => r.from.map((f: Plain) => f.podSelector.matchLabels['app.kubernetes.io/name']))).toEqual(['gateway']);
    const gw = find(prod, 'NetworkPolicy', 'gateway');
    const open = gw.spec.ingress.filter((r: Plain) => !r.from).flatMap((r: Plain) => r.ports.map((p: Plain) => p.port));
    expect(open).toEqual([8080]); // the operator and Envoy admin ports: monitoring namespace only
  });

  it('secrets: provider key, admin token, identity keys and the Redis URL come from Secrets that exist; no real value is committed', () => {
    const secrets = prod.filter((o) => o.kind === 'Secret');
    const names = new Set(secrets.map((s) => s.metadata.name));
    for (const v of pod.volumes.filter((x: Plain) => x.secret)) expect(names).toContain(v.secret.secretName);
    for (const e of container('sidecar').envFrom.filter((x: Plain) => x.secretRef)) expect(names).toContain(e.secretRef.name);
    const gs = find(prod, 'Secret', 'gateway-secrets');
    expect(gs.stringData).toEqual({ 'provider-key': '', 'admin-token': '' });
    for (const k of ['UPSTREAM_API_KEY_FILE', 'ADMIN_TOKEN_FILE', 'IDENTITY_JWKS_FILE']) expect(envMap.data[k]).toMatch(/^\/etc\/gateway\//);
    expect(existsSync(join(K8S, 'README.md'))).toBe(true);
  });

  it('Redis keeps money on disk: append-only file, fsync every second, a persistent volume, no eviction', () => {
    const redis = find(prod, 'StatefulSet', 'redis');
    expect(redis.spec.template.spec.containers[0].args).toEqual(expect.arrayContaining(['--appendonly', 'yes', '--appendfsync', 'everysec', '--maxmemory-policy', 'noeviction']));
    expect(redis.spec.volumeClaimTemplates[0].metadata.name).toBe('data');
  });
});
