/**
 * Where a JSON chat's time goes at one connection: bare Envoy, the floor
 * (the gateway's Envoy on the no-op sidecar), the floor with answers shaped
 * like the gateway's (the same header edits, the body replaced, dynamic
 * metadata: what Envoy itself spends applying the gateway's answers), the
 * memory-store gateway and the Redis-store gateway with the credit check on,
 * started as the bench
 * starts them (targets.ts) and sent chats in turn, one at a time. Prints, p50
 * over the requests, the phases Envoy's access log times (the ext_authz check,
 * the request body's ext_proc round trip, the provider, the response's
 * processing), the sidecar's own mean time for a ledger operation and an
 * authorization (its /metrics), and what Redis itself spends per script
 * (INFO commandstats). The columns' differences say which hop the gateway's
 * code makes longer than the floor's and by how much. A second table takes
 * each target's slowest 1 % of requests (by Envoy's own time for the request)
 * and gives the mean of each phase over them: whether one hop makes the tail
 * (a p99 row) or every hop is slower alike (the box).
 *
 * Every target first gets TIMELINE_LOAD_WARMUP_SECONDS of load at 16 connections
 * (warm-up.ts: the sidecars' code optimized, as in service), then 2,500 chats
 * in turn that are not measured (V8 compiles for the first 2,000-3,000 at one
 * connection: jit-settle.ts); the sidecar and Redis means cover the measured
 * chats only.
 *
 * TIMELINE_GAP_MS puts an idle pause before each request: on a virtual
 * machine every hop between processes then starts from an idle CPU, and the
 * same request takes longer (docs/benchmark.md, 2026-11-26 evening).
 *
 *   npx tsx test/bench/json-timeline.ts     TIMELINE_REQUESTS (default 3800 per target; the first 2500 warm up)
 *                                           TIMELINE_GAP_MS (default 0)
 *                                           TIMELINE_LOAD_WARMUP_SECONDS (default 5; 0: none, as before session 21)
 */
import { Agent, request } from 'node:http';
import { startTargets, stopTargets, installCleanupHandlers, type Targets } from './targets.js';
import { chatBody } from './scenarios.js';
import { latencyStats } from './latency.js';
import { envInteger, fmt, table } from './report.js';
import type { TestGateway } from '../harness/gateway.js';
import { Redis } from 'ioredis';
import { LOAD_WARMUP_SECONDS, warmUnderLoad } from './warm-up.js';

const REQUESTS = envInteger('TIMELINE_REQUESTS', 3800, 2600);
const GAP_MS = envInteger('TIMELINE_GAP_MS', 0, 0);
const LOAD_WARMUP = envInteger('TIMELINE_LOAD_WARMUP_SECONDS', LOAD_WARMUP_SECONDS, 0);
const WARMUP = 2500;
const INTERNAL_MODEL = 'sim-core-1';

const median = (xs: number[]): number => latencyStats(xs).p50;

interface Target {
  readonly label: string;
  readonly url: string;
  readonly headers: Record<string, string>;
  readonly body: string;
  readonly gateway: TestGateway | null;
  readonly agent: Agent;
  readonly client: number[];
}

/** Milliseconds from writing the request to its last byte; the answer must be a 200. */
function chat(t: Target): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const headers = { ...t.headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(t.body) };
    const req = request(t.url, { method: 'POST', agent: t.agent, headers }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve(performance.now() - t0) : reject(new Error(`${t.label}: status ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end(t.body);
  });
}

type LogLine = Record<string, number | string>;
/** An Envoy's access-log lines of the measured requests (the last `n` with timings). */
function accessLog(lines: readonly string[], n: number): LogLine[] {
  return lines
    .flatMap((l) => {
      try {
        const j = JSON.parse(l) as LogLine;
        return typeof j.upstream_rx_last_us === 'number' ? [j] : [];
      } catch {
        return [];
      }
    })
    .slice(-n);
}

interface Histogram {
  readonly sum: number;
  readonly count: number;
}
/** A histogram of the sidecar's /metrics (sum and count of the series matching `labels`). */
async function histogram(gw: TestGateway, name: string, labels: string): Promise<Histogram> {
  const text = await (await fetch(`${gw.stack.adminUrl}/metrics`, { headers: { authorization: `Bearer ${gw.stack.adminToken}` } })).text();
  const value = (suffix: string) => Number(new RegExp(`^${name}_${suffix}\\{${labels}\\} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  return { sum: value('sum'), count: value('count') };
}
/** The sidecar histograms the table reports: row, metric, labels. */
const SIDECAR_SERIES: ReadonlyArray<readonly [string, string, string]> = [
  ['sidecar: an authorization, mean (its /metrics)', 'gateway_phase_duration_seconds', 'phase="authorization"'],
  ['sidecar: a ledger operation (hold or settlement), mean', 'gateway_store_operation_duration_seconds', 'store="ledger",result="ok"'],
];
async function snapshot(targets: readonly Target[]): Promise<Array<Array<Histogram | null>>> {
  return Promise.all(SIDECAR_SERIES.map(([, name, labels]) => Promise.all(targets.map((x) => (x.gateway ? histogram(x.gateway, name, labels) : null)))));
}

function targetsOf(t: Targets): Target[] {
  const agent = () => new Agent({ keepAlive: true, maxSockets: 1 });
  const provider = (label: string, base: string): Target => ({
    label, url: `${base}/v1/chat/completions`, headers: { authorization: `Bearer ${t.upstreamKey}` },
    body: chatBody(INTERNAL_MODEL), gateway: null, agent: agent(), client: [],
  });
  const gateway = (label: string, gw: TestGateway): Target => ({
    label, url: `${gw.base}/chat/completions`, headers: { 'x-api-key': gw.key }, body: chatBody('svc-core'), gateway: gw, agent: agent(), client: [],
  });
  return [
    provider('bare Envoy', t.bareUrl),
    provider('floor', t.floorUrl),
    provider('floor, shaped answers', t.shapedFloorUrl ?? ''),
    gateway('memory store', t.gateway),
    gateway('Redis, credit check on', t.variant('credit').gateway),
  ];
}

installCleanupHandlers();
const t = await startTargets({ variants: ['credit'], shapedFloor: true });
try {
  const targets = targetsOf(t);
  for (const target of targets) {
    await warmUnderLoad({ url: target.url, method: 'POST', headers: { ...target.headers, 'content-type': 'application/json' }, body: target.body }, 16, LOAD_WARMUP);
  }
  const credit = t.variant('credit');
  const probe = new Redis(credit.redisUrl);
  let before: Array<Array<Histogram | null>> = [];
  for (let i = 0; i < REQUESTS; i++) {
    if (i === WARMUP) {
      before = await snapshot(targets);
      await probe.config('RESETSTAT');
    }
    for (const target of targets) {
      if (GAP_MS) await new Promise((r) => setTimeout(r, GAP_MS));
      const ms = await chat(target);
      if (i >= WARMUP) target.client.push(ms);
    }
  }
  const after = await snapshot(targets);
  await new Promise((r) => setTimeout(r, 300)); // the last access-log lines
  const measured = REQUESTS - WARMUP;
  const logs = targets.map((target) => accessLog(t.envoyLines(target.url), measured));
  // A field the Envoy does not have (bare Envoy runs no ext_authz or ext_proc) is no number: "-".
  const field = (j: LogLine, name: string): number => {
    const v = j[name];
    return typeof v === 'number' || (typeof v === 'string' && /^\d+$/.test(v)) ? Number(v) : NaN;
  };
  const us = (name: string) => (j: LogLine) => field(j, name);
  const between = (from: string, to: string) => (j: LogLine) => field(j, to) - field(j, from);
  const p50 = (i: number, f: (j: LogLine) => number): string => {
    const xs = (logs[i] as LogLine[]).map(f).filter(Number.isFinite);
    return xs.length ? fmt(median(xs) / 1000) : '-';
  };
  const rows: Array<[string, (j: LogLine) => number]> = [
    ['ext_authz check, as Envoy waits for it (authz_us)', us('authz_us')],
    ['request body round trip to ext_proc (proc_req_body_us)', us('proc_req_body_us')],
    ['first request byte -> provider request sent', us('upstream_tx_us')],
    ['provider: request sent -> its last byte', between('upstream_tx_us', 'upstream_rx_last_us')],
    ['provider last byte -> caller first byte (response processing)', between('upstream_rx_last_us', 'downstream_tx_first_us')],
    ['first request byte -> caller last byte (Envoy)', us('downstream_tx_last_us')],
  ];
  process.stdout.write(`JSON chats, one connection per target, in turn, ${measured} measured each${GAP_MS ? `, ${GAP_MS} ms idle before each` : ''}; ms, p50\n`);
  const mean = (b: Histogram | null | undefined, a: Histogram | null | undefined) => (a && b ? fmt(((a.sum - b.sum) / (a.count - b.count)) * 1000) : '-');
  const sidecarRows = SIDECAR_SERIES.map(([what], k) => [what, ...targets.map((_, i) => mean(before[k]?.[i], after[k]?.[i]))]);
  // The slowest 1 % by Envoy's whole time for the request: which phase makes them slow.
  const slowest = logs.map((l) => {
    const total = us('downstream_tx_last_us');
    const sorted = [...l].filter((j) => Number.isFinite(total(j))).sort((a, b) => total(b) - total(a));
    return sorted.slice(0, Math.max(1, Math.floor(sorted.length / 100)));
  });
  const tailMean = (i: number, f: (j: LogLine) => number): string => {
    const xs = (slowest[i] as LogLine[]).map(f).filter(Number.isFinite);
    return xs.length ? fmt(xs.reduce((a, b) => a + b, 0) / xs.length / 1000) : '-';
  };
  const stats = await probe.info('commandstats');
  probe.disconnect();
  const evalsha = Number(/^cmdstat_evalsha:.*usec_per_call=([\d.]+)/m.exec(stats)?.[1] ?? NaN) / 1000;
  process.stdout.write(
    `${table(
      ['measure', ...targets.map((x) => x.label)],
      [
        ['client: request written -> last byte', ...targets.map((x) => fmt(median(x.client)))],
        ...rows.map(([what, f]): string[] => [what, ...targets.map((_, i) => p50(i, f))]),
        ...sidecarRows,
        ['Redis: one script (EVALSHA), mean of its own time', ...targets.map((x) => (x.gateway === credit.gateway ? fmt(evalsha) : '-'))],
      ],
    )}\n\nThe slowest 1 % of each target's requests (by Envoy's first request byte -> caller last byte), mean ms per phase:\n${table(
      ['measure', ...targets.map((x) => x.label)],
      rows.map(([what, f]): string[] => [what, ...targets.map((_, i) => tailMean(i, f))]),
    )}\n`,
  );
} finally {
  await stopTargets();
}
