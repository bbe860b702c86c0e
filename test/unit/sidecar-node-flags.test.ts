// The sidecar's V8 heap flags (sidecar/stack/node-flags.ts) are the same
// wherever it is started, and its heap limit fits the memory limit its
// container gets in deploy/k8s (base and production overlay).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../sidecar/stack/paths.js';
import { SIDECAR_HEAP_LIMIT_MB, SIDECAR_NODE_FLAGS } from '../../sidecar/stack/node-flags.js';

type Plain = Record<string, any>;
const read = (...p: string[]) => readFileSync(join(REPO_ROOT, ...p), 'utf8');
const expected = ['node', ...SIDECAR_NODE_FLAGS, '--import', 'tsx', 'sidecar/src/main.ts'];
const sidecarOf = (file: string): Plain => (parseYaml(read(file)) as Plain).spec.template.spec.containers.find((c: Plain) => c.name === 'sidecar');
/** "512Mi" / "1Gi" in MiB. */
const mib = (q: string) => {
  const m = /^(\d+)(Mi|Gi)$/.exec(q);
  if (!m) throw new Error(`unexpected quantity ${q}`);
  return Number(m[1]) * (m[2] === 'Gi' ? 1024 : 1);
};
/** Room the rest of the process needs beside the old generation: young generation, code, gRPC and Redis buffers. */
const NON_HEAP_MB = 96;

describe('sidecar heap flags', () => {
  it('are set in the image, docker-compose.yml and the Kubernetes Deployment', () => {
    const cmd = /^CMD (\[.*\])$/m.exec(read('sidecar', 'Dockerfile'))?.[1];
    expect(JSON.parse(cmd ?? 'null')).toEqual(expected);
    expect((parseYaml(read('docker-compose.yml'), { merge: true }) as Plain).services.sidecar.command).toEqual(expected);
    expect(sidecarOf('deploy/k8s/base/gateway-deployment.yaml').command).toEqual(expected);
  });

  it('limit the heap below every container memory limit of the sidecar, with room for the rest of the process', () => {
    const limits = ['deploy/k8s/base/gateway-deployment.yaml', 'deploy/k8s/overlays/production/gateway-resources.yaml'].map((f) => sidecarOf(f).resources.limits.memory as string);
    expect(limits.length).toBe(2);
    for (const l of limits) expect(SIDECAR_HEAP_LIMIT_MB + NON_HEAP_MB, l).toBeLessThanOrEqual(mib(l));
  });

  it('are valid for this node', async () => {
    const { execFileSync } = await import('node:child_process');
    const limit = execFileSync(process.execPath, [...SIDECAR_NODE_FLAGS, '-p', "require('v8').getHeapStatistics().heap_size_limit"], { encoding: 'utf8' });
    expect(Number(limit) / 1048576).toBeLessThan(SIDECAR_HEAP_LIMIT_MB + NON_HEAP_MB);
  });
});
