/**
 * What the sidecar's garbage collector costs per request, and why: starts one
 * full gateway (redis store, credit check on, as the bench's `credit`
 * variant) with the sidecar under `--trace-gc-nvp`, drives JSON chats and
 * then 32-token streams at 16 connections, and prints per request, from V8's
 * own trace of every collection in the measured window:
 *
 *   - the collections (scavenges, mark-compacts) and their main-thread pause;
 *   - the time V8's helper threads report for the same collections;
 *   - the bytes promoted to the old generation (what survived two scavenges:
 *     a finished request's objects should not, so this is the number to
 *     watch when looking for something that keeps them);
 *   - the sidecar's CPU by thread (/proc): the main thread and V8's helper
 *     threads (garbage collection and compilation).
 *
 * Promotion and GC time are steadier than whole-process CPU on a shared box:
 * compare them before and after a change (session 18 found two per-request
 * registries that made every finished chat's gRPC call survive). With
 * GC_SINGLE_THREADED=1 the sidecar runs `--single-threaded-gc`: all GC work
 * then shows on the main thread (a cost independent of how the helper
 * threads were scheduled).
 *
 *   npx tsx test/bench/gc-cost.ts       GC_REQUESTS (default 4000) JSON chats, GC_STREAMS (default 1000) streams,
 *                                       GC_SINGLE_THREADED=1, GC_NODE_ARGS='--flag ...' (more sidecar flags,
 *                                       after its own heap flags: what a V8 setting costs or saves)
 */
import { readFileSync, readdirSync } from 'node:fs';
import { startGateway } from '../harness/gateway.js';
import { driveGateway } from './gateway-load.js';
import { CREDIT_GRANT, GATEWAY_VARIANTS } from './targets.js';
import { envInteger, fmt, table } from './report.js';

const REQUESTS = envInteger('GC_REQUESTS', 4000);
const STREAMS = envInteger('GC_STREAMS', 1000);
const CONNECTIONS = 16;
const SINGLE = process.env.GC_SINGLE_THREADED === '1';
const NODE_ARGS = (process.env.GC_NODE_ARGS ?? '').split(' ').filter(Boolean);
/** Linux reports thread CPU in clock ticks (USER_HZ, 100 a second). */
const MS_PER_TICK = 10;

/** CPU ms of each thread of `pid`: the main thread as "main", the others summed by name. */
function threadCpu(pid: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ms = (Number(fields[11]) + Number(fields[12])) * MS_PER_TICK;
    const name = tid === String(pid) ? 'main' : `helpers (${readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim()})`;
    out.set(name, (out.get(name) ?? 0) + ms);
  }
  return out;
}

/** A numeric field of one --trace-gc-nvp line. */
const field = (line: string, name: string): number => Number(new RegExp(`\\b${name.replace(/\./g, '\\.')}=([\\d.]+)`).exec(line)?.[1] ?? 0);
const helperMs = (line: string): number => [...line.matchAll(/\bbackground\.[\w.]+=([\d.]+)/g)].reduce((sum, m) => sum + Number(m[1]), 0);

async function main(): Promise<void> {
  const spec = GATEWAY_VARIANTS.credit;
  const gw = await startGateway({ ...spec.options, nodeArgs: { sidecar: ['--trace-gc-nvp', ...(SINGLE ? ['--single-threaded-gc'] : []), ...NODE_ARGS] } });
  try {
    await gw.admin.adjustCredits(gw.tenantId, CREDIT_GRANT, 'gc-grant', 'gc-cost');
    const sidecar = gw.stack.process('sidecar');
    const pid = sidecar.pid as number;
    // The process keeps only its recent output lines: collect the trace's as they come.
    let gcs: string[] = [];
    const keep = sidecar.lines.push.bind(sidecar.lines);
    sidecar.lines.push = (...lines: string[]) => {
      for (const l of lines) if (/\bgc=(s|mc)\b/.test(l)) gcs.push(l);
      return keep(...lines);
    };
    const rows: string[][] = [];
    for (const [kind, n, warm] of [['JSON chat', REQUESTS, 3000], ['stream (36 events)', STREAMS, 800]] as const) {
      const load = kind === 'JSON chat' ? 'json' : 'stream';
      await driveGateway(gw, warm, load, CONNECTIONS);
      gcs = [];
      const cpu0 = threadCpu(pid);
      await driveGateway(gw, n, load, CONNECTIONS);
      await new Promise((r) => setTimeout(r, 200));
      const cpu1 = threadCpu(pid);
      const scavenges = gcs.filter((l) => /\bgc=s\b/.test(l));
      const per = (x: number) => fmt((x / n) * 1000, 1);
      const helpers = [...cpu1].filter(([k]) => k !== 'main').reduce((sum, [k, v]) => sum + v - (cpu0.get(k) ?? 0), 0);
      rows.push([
        kind,
        String(n),
        fmt((scavenges.length / n) * 1000, 1),
        fmt(((gcs.length - scavenges.length) / n) * 1000, 1),
        per(gcs.reduce((sum, l) => sum + field(l, 'pause'), 0)),
        per(gcs.reduce((sum, l) => sum + helperMs(l), 0)),
        fmt(scavenges.reduce((sum, l) => sum + field(l, 'promoted'), 0) / n, 0),
        fmt(((cpu1.get('main') ?? 0) - (cpu0.get('main') ?? 0)) / n, 3),
        fmt(helpers / n, 3),
      ]);
    }
    process.stdout.write(
      `sidecar GC, store redis, credit check on, ${CONNECTIONS} connections${SINGLE ? ', --single-threaded-gc' : ''}${NODE_ARGS.length ? `, ${NODE_ARGS.join(' ')}` : ''} (--trace-gc-nvp; CPU from /proc, 10 ms ticks)\n` +
        table(['request', 'n', 'scavenges /1000', 'mark-compacts /1000', 'GC pause µs/req (main)', 'GC helper µs/req (reported)', 'promoted B/req', 'CPU main ms/req', 'CPU helper threads ms/req'], rows) +
        '\n',
    );
  } finally {
    await gw.stop();
  }
}

await main();
