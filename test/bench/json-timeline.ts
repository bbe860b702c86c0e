/**
 * Where a JSON chat's time goes at one connection: the memory-store gateway
 * and the Redis-store gateway with the credit check on, started side by side
 * and sent chats alternately, one at a time. Prints, p50 over the requests,
 * the phases Envoy's access log times (the ext_authz check, the request body's
 * ext_proc round trip, the provider, the response's processing), the sidecar's
 * own mean time for a ledger operation and an authorization (its /metrics),
 * and what Redis itself spends per script (INFO commandstats).
 *
 * TIMELINE_GAP_MS puts an idle pause before each request: on a virtual
 * machine every hop between processes then starts from an idle CPU, and the
 * same request takes longer (docs/benchmark.md, 2026-11-26 evening).
 *
 *   npx tsx test/bench/json-timeline.ts     TIMELINE_REQUESTS (default 1500 per gateway; the first 200 warm up)
 *                                           TIMELINE_GAP_MS (default 0)
 */
import { Agent, request } from 'node:http';
import { Redis } from 'ioredis';
import { startGateway, type TestGateway } from '../harness/gateway.js';
import { CREDIT_GRANT, GATEWAY_VARIANTS } from './targets.js';
import { chatBody } from './scenarios.js';
import { latencyStats } from './latency.js';
import { fmt, table } from './report.js';

const num = (name: string, dflt: number, min: number) => {
  const v = Number(process.env[name] ?? dflt);
  if (!Number.isInteger(v) || v < min) throw new Error(`${name} must be an integer of at least ${min}`);
  return v;
};
const REQUESTS = num('TIMELINE_REQUESTS', 1500, 300);
const GAP_MS = num('TIMELINE_GAP_MS', 0, 0);
const WARMUP = 200;

const median = (xs: number[]): number => latencyStats(xs).p50;

/** Milliseconds from writing the request to its last byte; the answer must be a 200. */
function chat(gw: TestGateway, agent: Agent, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const headers = { 'content-type': 'application/json', 'x-api-key': gw.key, 'content-length': Buffer.byteLength(body) };
    const req = request(`${gw.base}/chat/completions`, { method: 'POST', agent, headers }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve(performance.now() - t0) : reject(new Error(`status ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}

type LogLine = Record<string, number | string>;
/** The gateway Envoy's access-log lines of the measured requests (the last `n` with timings). */
function accessLog(gw: TestGateway, n: number): LogLine[] {
  return gw.stack
    .process('envoy')
    .lines.flatMap((l) => {
      try {
        const j = JSON.parse(l) as LogLine;
        return typeof j.upstream_rx_last_us === 'number' && j.route !== undefined ? [j] : [];
      } catch {
        return [];
      }
    })
    .slice(-n);
}

/** Mean seconds of a histogram in the sidecar's /metrics (sum / count of the series matching `labels`). */
async function histogramMean(gw: TestGateway, name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${gw.stack.adminUrl}/metrics`, { headers: { authorization: `Bearer ${gw.stack.adminToken}` } })).text();
  const value = (suffix: string) => Number(new RegExp(`^${name}_${suffix}\\{${labels}\\} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  return value('sum') / value('count');
}

const gateways = {
  memory: await startGateway({}),
  credit: await startGateway({ ...GATEWAY_VARIANTS.credit.options }),
};
try {
  await gateways.credit.admin.adjustCredits(gateways.credit.tenantId, CREDIT_GRANT, 'timeline-grant', 'timeline');
  const body = chatBody('svc-core');
  const agents = { memory: new Agent({ keepAlive: true, maxSockets: 1 }), credit: new Agent({ keepAlive: true, maxSockets: 1 }) };
  const client: Record<keyof typeof gateways, number[]> = { memory: [], credit: [] };
  for (let i = 0; i < REQUESTS; i++) {
    for (const name of ['memory', 'credit'] as const) {
      if (GAP_MS) await new Promise((r) => setTimeout(r, GAP_MS));
      const ms = await chat(gateways[name], agents[name], body);
      if (i >= WARMUP) client[name].push(ms);
    }
  }
  await new Promise((r) => setTimeout(r, 300)); // the last access-log lines
  const measured = REQUESTS - WARMUP;
  const logs = { memory: accessLog(gateways.memory, measured), credit: accessLog(gateways.credit, measured) };
  const p50 = (name: keyof typeof logs, f: (j: LogLine) => number) => fmt(median(logs[name].map(f)) / 1000);
  const us = (field: string) => (j: LogLine) => Number(j[field]);
  const between = (from: string, to: string) => (j: LogLine) => Number(j[to]) - Number(j[from]);
  const rows: Array<[string, (j: LogLine) => number]> = [
    ['ext_authz check, as Envoy waits for it (authz_us)', us('authz_us')],
    ['request body round trip to ext_proc (proc_req_body_us)', us('proc_req_body_us')],
    ['first request byte -> provider request sent', us('upstream_tx_us')],
    ['provider: request sent -> its last byte', between('upstream_tx_us', 'upstream_rx_last_us')],
    ['provider last byte -> caller first byte (response processing)', between('upstream_rx_last_us', 'downstream_tx_first_us')],
    ['first request byte -> caller last byte (Envoy)', us('downstream_tx_last_us')],
  ];
  process.stdout.write(`JSON chats, one connection per gateway, alternately, ${measured} measured each${GAP_MS ? `, ${GAP_MS} ms idle before each` : ''}; ms, p50\n`);
  const sidecar = async (gw: TestGateway) => ({
    ledger: (await histogramMean(gw, 'gateway_store_operation_duration_seconds', 'store="ledger",result="ok"')) * 1000,
    authz: (await histogramMean(gw, 'gateway_phase_duration_seconds', 'phase="authorization"')) * 1000,
  });
  const own = { memory: await sidecar(gateways.memory), credit: await sidecar(gateways.credit) };
  const probe = new Redis(gateways.credit.redis!.url);
  const stats = await probe.info('commandstats');
  probe.disconnect();
  const evalsha = Number(/^cmdstat_evalsha:.*usec_per_call=([\d.]+)/m.exec(stats)?.[1] ?? NaN) / 1000;
  process.stdout.write(
    `${table(
      ['measure', 'memory store', 'Redis, credit check on'],
      [
        ['client: request written -> last byte', fmt(median(client.memory)), fmt(median(client.credit))],
        ...rows.map(([what, f]): string[] => [what, p50('memory', f), p50('credit', f)]),
        ['sidecar: an authorization, mean (its /metrics)', fmt(own.memory.authz), fmt(own.credit.authz)],
        ['sidecar: a ledger operation (hold or settlement), mean', fmt(own.memory.ledger), fmt(own.credit.ledger)],
        ['Redis: one script (EVALSHA), mean of its own time', '-', fmt(evalsha)],
      ],
    )}\n`,
  );
} finally {
  await Promise.all([gateways.memory.stop(), gateways.credit.stop()]);
}
