/**
 * What hostile clients can make the edge hold in memory (issue 9, items 3 and 4):
 *
 *   flood   FLOOD_CLIENTS (12) parallel uploads of FLOOD_MB (31) MB each, with no
 *           key and with an unknown key, every byte pushed as fast as the
 *           gateway takes it;
 *   slow    SLOW_READERS (20) streamed chat answers of several MB, each read
 *           one byte a second for SLOW_SECONDS (20).
 *
 * Prints Envoy's and the sidecar's resident memory (and Envoy's own heap
 * figures) at idle, at the peak during each phase and after it, as a table
 * and a final `EDGE_MEMORY_JSON {…}` line. Loopback only, bounded in time.
 * For the slow readers it also prints where the bytes are (issue 9 item 4):
 * a timeline of Envoy's byte counters (read from the provider, written to and
 * read from the sidecar, written to the callers) and flow-control counters.
 * FLOOD_CLIENTS=0 skips the flood.
 *
 *   npx tsx test/bench/edge-memory.ts
 */
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { startGateway, type TestGateway } from '../harness/gateway.js';

const FLOOD_CLIENTS = Number(process.env.FLOOD_CLIENTS ?? 12);
const FLOOD_MB = Number(process.env.FLOOD_MB ?? 31);
const SLOW_READERS = Number(process.env.SLOW_READERS ?? 20);
const SLOW_SECONDS = Number(process.env.SLOW_SECONDS ?? 20);
/** limits.connectionBufferBytes to run with (default: the gateway's default). */
const BUFFER_BYTES = process.env.CONNECTION_BUFFER_BYTES ? Number(process.env.CONNECTION_BUFFER_BYTES) : undefined;

const MB = 1024 * 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function rssOf(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN;
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : Number.NaN;
}

interface Sample {
  envoyRss: number;
  sidecarRss: number;
  envoyAllocated: number;
  envoyHeap: number;
}

async function sample(gw: TestGateway): Promise<Sample> {
  const mem = (await (await fetch(`${gw.stack.envoyAdminUrl}/memory`)).json()) as { allocated: string; heap_size: string };
  return {
    envoyRss: rssOf(gw.stack.process('envoy').pid),
    sidecarRss: rssOf(gw.stack.process('sidecar').pid),
    envoyAllocated: Number(mem.allocated),
    envoyHeap: Number(mem.heap_size),
  };
}

/** Samples every 100 ms while `work` runs; returns the per-field maximum. */
async function peakDuring(gw: TestGateway, work: Promise<unknown>): Promise<Sample> {
  const peak: Sample = await sample(gw);
  let running = true;
  void work.finally(() => (running = false));
  while (running) {
    const s = await sample(gw);
    for (const k of Object.keys(peak) as (keyof Sample)[]) peak[k] = Math.max(peak[k], s[k]);
    await sleep(100);
  }
  return peak;
}

/** Envoy's counters that show where a slow reader's bytes are. */
const FLOW = {
  providerIn: 'cluster.provider.upstream_cx_rx_bytes_total',
  toSidecar: 'cluster.sidecar.upstream_cx_tx_bytes_total',
  fromSidecar: 'cluster.sidecar.upstream_cx_rx_bytes_total',
  toCallers: 'http.gateway.downstream_cx_tx_bytes_total',
  providerPaused: 'cluster.provider.upstream_flow_control_paused_reading_total',
  sidecarBackedUp: 'cluster.sidecar.upstream_flow_control_backed_up_total',
  // Gauges: what sits in connection buffers now (provider read side; sidecar and callers write side).
  providerRxBuffered: 'cluster.provider.upstream_cx_rx_bytes_buffered',
  sidecarTxBuffered: 'cluster.sidecar.upstream_cx_tx_bytes_buffered',
  callersTxBuffered: 'http.gateway.downstream_cx_tx_bytes_buffered',
} as const;
const GAUGES: ReadonlySet<string> = new Set(['providerRxBuffered', 'sidecarTxBuffered', 'callersTxBuffered']);
type Flow = Record<keyof typeof FLOW, number> & { envoyAllocated: number; sidecarRss: number };

async function flowStats(gw: TestGateway): Promise<Flow> {
  const text = await (await fetch(`${gw.stack.envoyAdminUrl}/stats?usedonly`)).text();
  const stat = new Map(text.split('\n').map((l) => l.split(': ') as [string, string]));
  const s = await sample(gw);
  const counters = Object.fromEntries(Object.entries(FLOW).map(([k, name]) => [k, Number(stat.get(name) ?? 0)])) as Record<keyof typeof FLOW, number>;
  return { ...counters, envoyAllocated: s.envoyAllocated, sidecarRss: s.sidecarRss };
}

/** The counters' growth since `base` (memory figures as they are). */
const since = (base: Flow, now: Flow): Flow =>
  ({ ...Object.fromEntries(Object.keys(FLOW).map((k) => [k, now[k as keyof typeof FLOW] - (GAUGES.has(k) ? 0 : base[k as keyof typeof FLOW])])), envoyAllocated: now.envoyAllocated, sidecarRss: now.sidecarRss }) as Flow;

/** One upload: headers, then the whole body as fast as the socket takes it; resolves with the status (0: none). */
function upload(port: number, key: string | null): Promise<number> {
  return new Promise((resolve) => {
    const size = FLOOD_MB * MB;
    const chunk = Buffer.alloc(MB, 0x20);
    let answer = '';
    const s = connect(port, '127.0.0.1');
    const finish = () => {
      s.destroy();
      resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0));
    };
    s.on('connect', async () => {
      s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: ${size}\r\n${key ? `X-API-Key: ${key}\r\n` : ''}\r\n`);
      for (let sent = 0; sent < size && !s.destroyed; sent += MB) {
        if (!s.write(chunk)) await new Promise((r) => s.once('drain', r).once('close', r));
      }
    });
    s.on('data', (d) => (answer += d.toString('latin1')));
    s.on('close', finish);
    s.on('error', finish);
    setTimeout(finish, 30_000);
  });
}

/** A streamed chat answer read one byte a second for `seconds`; resolves with the bytes read. */
function slowReader(port: number, key: string, seconds: number): Promise<number> {
  return new Promise((resolve) => {
    const body = JSON.stringify({ model: 'svc-core', stream: true, max_tokens: 200000, messages: [{ role: 'user', content: 'long #sim:tokens=200000' }] });
    const s: Socket = connect(port, '127.0.0.1', () => {
      s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-API-Key: ${key}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    });
    s.pause();
    let read = 0;
    const tick = setInterval(() => {
      if (s.read(1) !== null) read++;
    }, 1000);
    setTimeout(() => {
      clearInterval(tick);
      s.destroy();
      resolve(read);
    }, seconds * 1000);
  });
}

const fmt = (b: number) => `${(b / MB).toFixed(1)} MB`;
const delta = (a: Sample, b: Sample) => `${(b.envoyRss - a.envoyRss) / MB >= 0 ? '+' : ''}${((b.envoyRss - a.envoyRss) / MB).toFixed(1)}`;

async function main() {
  const gw = await startGateway(BUFFER_BYTES ? { config: { limits: { connectionBufferBytes: BUFFER_BYTES } } } : {});
  const port = Number(new URL(gw.base).port);
  const results: Record<string, unknown> = { connection_buffer_bytes: gw.config.limits.connectionBufferBytes, flood_clients: FLOOD_CLIENTS, flood_mb: FLOOD_MB, slow_readers: SLOW_READERS, slow_seconds: SLOW_SECONDS };
  try {
    await fetch(`${gw.base}/models`, { headers: { 'x-api-key': gw.key } }); // warm
    await sleep(1000);
    const idle = await sample(gw);

    const flood = Promise.all([
      ...Array.from({ length: Math.floor(FLOOD_CLIENTS / 2) }, () => upload(port, null)),
      ...Array.from({ length: FLOOD_CLIENTS - Math.floor(FLOOD_CLIENTS / 2) }, () => upload(port, `svc_pk_${'Z'.repeat(43)}`)),
    ]);
    const floodPeak = await peakDuring(gw, flood);
    const statuses = await flood;
    await sleep(2000);
    const afterFlood = await sample(gw);

    const flowBase = await flowStats(gw);
    const readers = Promise.all(Array.from({ length: SLOW_READERS }, () => slowReader(port, gw.key, SLOW_SECONDS)));
    const timeline: Array<[number, Flow]> = [];
    const marks = [0.5, 1, 2, 4, 8, SLOW_SECONDS - 1.5].filter((t) => t > 0 && t < SLOW_SECONDS - 1);
    for (const t of marks) void sleep(t * 1000).then(async () => timeline.push([t, since(flowBase, await flowStats(gw))]));
    const slowPeak = await peakDuring(gw, readers);
    await readers;
    await sleep(3000);
    const afterSlow = await sample(gw);

    const rows: Array<[string, Sample]> = [
      ['idle', idle],
      ['flood, peak', floodPeak],
      ['flood, 2 s after', afterFlood],
      ['slow readers, peak', slowPeak],
      ['slow readers, 3 s after', afterSlow],
    ];
    console.log(`flood: ${FLOOD_CLIENTS} × ${FLOOD_MB} MB uploads without a valid key → statuses ${JSON.stringify(statuses.reduce<Record<number, number>>((m, s) => ({ ...m, [s]: (m[s] ?? 0) + 1 }), {}))}`);
    console.log(`slow: ${SLOW_READERS} streams read one byte a second for ${SLOW_SECONDS} s`);
    console.log('| moment | Envoy RSS | Δ idle | Envoy heap (allocated) | sidecar RSS |');
    console.log('|---|---|---|---|---|');
    for (const [name, s] of rows) {
      console.log(`| ${name} | ${fmt(s.envoyRss)} | ${delta(idle, s)} MB | ${fmt(s.envoyHeap)} (${fmt(s.envoyAllocated)}) | ${fmt(s.sidecarRss)} |`);
    }
    for (const [name, s] of rows) results[name.replace(/[^a-z]+/g, '_')] = s;
    results.flood_statuses = statuses;
    timeline.sort((a, b) => a[0] - b[0]);
    console.log('slow readers, where the bytes are (MB since the readers started; paused/backed up: counts):');
    console.log('| t | read from provider | written to sidecar | read from sidecar | written to callers | provider paused | sidecar backed up | buffered: provider in / sidecar out / callers out | Envoy allocated | sidecar RSS |');
    console.log('|---|---|---|---|---|---|---|---|---|---|');
    for (const [t, f] of timeline) {
      console.log(`| ${t} s | ${fmt(f.providerIn)} | ${fmt(f.toSidecar)} | ${fmt(f.fromSidecar)} | ${fmt(f.toCallers)} | ${f.providerPaused} | ${f.sidecarBackedUp} | ${fmt(f.providerRxBuffered)} / ${fmt(f.sidecarTxBuffered)} / ${fmt(f.callersTxBuffered)} | ${fmt(f.envoyAllocated)} | ${fmt(f.sidecarRss)} |`);
    }
    const held = timeline.at(-1)?.[1];
    if (held) {
      // Read from the provider, not yet written to a caller's socket: in Envoy, in flight to or from the sidecar, or in the sidecar.
      const perStream = (held.providerIn - held.toCallers) / Math.max(1, SLOW_READERS);
      console.log(`read from the provider and not yet written to the callers: ${fmt(perStream)} a stream`);
      results.slow_timeline = timeline;
      results.provider_bytes_not_written_per_stream = Math.round(perStream);
    }
    console.log(`EDGE_MEMORY_JSON ${JSON.stringify(results)}`);
  } finally {
    await gw.stop();
  }
}

await main();
