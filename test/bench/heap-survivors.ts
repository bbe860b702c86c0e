/**
 * What the sidecar allocates per request that outlives a young-generation
 * collection, and where: starts one full gateway (Redis store, credit check
 * on, as the bench's `credit` variant) with the sidecar's inspector on a free
 * port, warms it up, then drives HEAP_REQUESTS requests of one kind at 16
 * connections under V8's sampling heap profiler with objects collected by
 * minor GCs left out (`HeapProfiler.startSampling`,
 * `includeObjectsCollectedByMinorGC: false`): what remains survived at least
 * one scavenge. Prints the sampled bytes per request and the allocation sites
 * with the most, by their innermost frames.
 *
 * A finished request's objects should die young; what survives is either in
 * flight during a scavenge (some of every request at 16 connections) or kept
 * alive by garbage in the old generation pointing at it (a dropped Set or Map
 * table, a timer list): sessions 18 and 19 found their registries this way
 * (docs/benchmark.md). Compare with `gc-cost.ts`'s promoted bytes.
 *
 *   npx tsx test/bench/heap-survivors.ts     HEAP_KIND json (default) or stream, HEAP_REQUESTS (default 4000),
 *                                            HEAP_ALL=1 every allocation (not only survivors),
 *                                            HEAP_BY=ours  group by the innermost frame in sidecar/src,
 *                                            HEAP_TOP (default 25) rows
 */
import { startGateway } from '../harness/gateway.js';
import { driveGateway, type LoadKind } from './gateway-load.js';
import { envInteger, fmt, table } from './report.js';
import { CREDIT_GRANT, GATEWAY_VARIANTS } from './targets.js';

const KIND: LoadKind = process.env.HEAP_KIND === 'stream' ? 'stream' : 'json';
const N = envInteger('HEAP_REQUESTS', 4000);
const TOP = envInteger('HEAP_TOP', 25);
const ALL = process.env.HEAP_ALL === '1';
const BY_OURS = process.env.HEAP_BY === 'ours';
const CONNECTIONS = 16;

interface CallFrame {
  readonly functionName: string;
  readonly url: string;
  readonly lineNumber: number;
}
interface SamplingNode {
  readonly callFrame: CallFrame;
  readonly selfSize: number;
  readonly children: readonly SamplingNode[];
}

/** A minimal Chrome DevTools Protocol client over the inspector's WebSocket (Node 22's global WebSocket). */
async function inspector(url: string): Promise<{ send: (method: string, params?: object) => Promise<any>; close: () => void }> {
  const ws = new WebSocket(url);
  await new Promise((resolve, reject) => {
    ws.addEventListener('open', resolve, { once: true });
    ws.addEventListener('error', reject, { once: true });
  });
  let id = 0;
  const waiting = new Map<number, (result: unknown) => void>();
  ws.addEventListener('message', (ev) => {
    const m = JSON.parse(String(ev.data)) as { id?: number; result?: unknown };
    if (m.id === undefined) return;
    waiting.get(m.id)?.(m.result);
    waiting.delete(m.id);
  });
  return {
    send: (method, params = {}) =>
      new Promise((resolve) => {
        id += 1;
        waiting.set(id, resolve);
        ws.send(JSON.stringify({ id, method, params }));
      }),
    close: () => ws.close(),
  };
}

const frameName = (f: CallFrame): string =>
  `${f.functionName || '(anonymous)'} ${f.url.replace(/^.*\/(sidecar\/src\/)/, '$1').replace(/^.*\/node_modules\//, '').replace(/^file:\/\//, '') || '(native)'}:${f.lineNumber}`;

/** Self bytes by allocation site: the innermost frames, or (HEAP_BY=ours) the innermost frame of ours and the allocating one. */
function bySite(head: SamplingNode): { total: number; sites: Map<string, number> } {
  const sites = new Map<string, number>();
  let total = 0;
  const walk = (node: SamplingNode, stack: string[]): void => {
    const here = [...stack, frameName(node.callFrame)];
    if (node.selfSize > 0) {
      total += node.selfSize;
      const ours = [...here].reverse().find((f) => f.includes('sidecar/src/'));
      const key = BY_OURS ? `${here[here.length - 1]} <~ ${ours ?? '(none of ours)'}` : here.slice(-4).reverse().join(' < ');
      sites.set(key, (sites.get(key) ?? 0) + node.selfSize);
    }
    for (const c of node.children) walk(c, here);
  };
  walk(head, []);
  return { total, sites };
}

async function main(): Promise<void> {
  const gw = await startGateway({ ...GATEWAY_VARIANTS.credit.options, nodeArgs: { sidecar: ['--inspect=127.0.0.1:0'] } });
  try {
    await gw.admin.adjustCredits(gw.tenantId, CREDIT_GRANT, 'heap-grant', 'heap-survivors');
    const url = await gw.stack.process('sidecar').waitForLine((l) => /ws:\/\/\S+/.exec(l)?.[0], 10_000);
    const cdp = await inspector(url);
    try {
      await driveGateway(gw, 3000, KIND, CONNECTIONS);
      await cdp.send('HeapProfiler.enable');
      await cdp.send('HeapProfiler.collectGarbage');
      await cdp.send('HeapProfiler.startSampling', { samplingInterval: 256, includeObjectsCollectedByMinorGC: ALL, includeObjectsCollectedByMajorGC: true });
      await driveGateway(gw, N, KIND, CONNECTIONS);
      const { profile } = (await cdp.send('HeapProfiler.stopSampling')) as { profile: { head: SamplingNode } };
      const { total, sites } = bySite(profile.head);
      const what = ALL ? 'allocated' : 'surviving a minor GC';
      process.stdout.write(
        `sidecar heap, store redis, credit check on, ${CONNECTIONS} connections, ${N} ${KIND === 'json' ? 'JSON chats' : '32-token streams'}: ` +
          `${fmt(total / N, 0)} B ${what} per request (sampled every 256 B)\n` +
          table(
            [BY_OURS ? 'allocated in <~ innermost frame of ours' : 'allocation site, innermost frame first', 'B per request'],
            [...sites]
              .sort((a, b) => b[1] - a[1])
              .slice(0, TOP)
              .map(([site, bytes]) => [site, fmt(bytes / N, 0)]),
          ) +
          '\n',
      );
    } finally {
      cdp.close();
    }
  } finally {
    await gw.stop();
  }
}

await main();
