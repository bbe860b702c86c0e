/**
 * Where the sidecar's CPU goes, per message: starts one full gateway (redis
 * store, credit check on, as the bench's `credit` variant) with the sidecar
 * under `node --cpu-prof`, drives JSON chats and then streamed chats through
 * Envoy, stops, and prints
 *
 *   - the sidecar's CPU per JSON request and per streamed event (/proc, while
 *     profiled: the profiler adds a little);
 *   - the profile's top functions by self time;
 *   - self time by category (grpc-js/http2, protobuf codec, Struct decoding,
 *     JSON, logging, ioredis, our code, ...), where V8 builtins and Node
 *     internals count for the nearest caller outside them.
 *
 * Only the samples taken while the load ran are counted (the profile's clock
 * and process.hrtime are both CLOCK_MONOTONIC on Linux).
 *
 * PROFILE_CPU_ONLY=1 runs the sidecar without the profiler and prints only its
 * CPU per request and per event, PROFILE_ROUNDS times (a quick before/after).
 *
 *   npx tsx test/bench/profile.ts        PROFILE_REQUESTS (default 2000) JSON chats,
 *                                        PROFILE_STREAMS (default 300) streams of 32 chunks,
 *                                        PROFILE_CONCURRENCY (default 4) connections,
 *                                        PROFILE_SLICED=1 streams sliced as the bench's sliced rows (1-500 bytes 1 ms apart, seeds in order),
 *                                        PROFILE_TOP (default 25) rows, PROFILE_INTERVAL_US (default 200) sampling interval,
 *                                        PROFILE_LOAD_WARMUP_SECONDS (default 5) of JSON and of stream load at 16
 *                                        connections before anything is counted (0: none, as before session 22),
 *                                        PROFILE_KEEP=1 keeps the .cpuprofile,
 *                                        PROFILE_CONFIG='{"log":{"level":"warn"}}' merged over the
 *                                        gateway's configuration (what one feature costs, run beside
 *                                        the default)
 *                                        PROFILE_TURNS=20 gives each JSON chat 20 messages of history first
 *                                        (about 13 KB; default 0: the bench's one-line chat)
 *                                        PROFILE_STORE=memory the same gateway on the memory store (what
 *                                        the Redis store costs the sidecar, run beside the default)
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startGateway } from '../harness/gateway.js';
import { mergeConfig } from '../../sidecar/src/config/load.js';
import { SequentialClient, StreamClient, countDataEvents } from './latency.js';
import { chatBody, streamBody, STREAM_TOKENS } from './scenarios.js';
import { CREDIT_GRANT, GATEWAY_VARIANTS } from './targets.js';
import { envInteger, fmt, table } from './report.js';
import { LOAD_WARMUP_SECONDS, warmUnderLoad } from './warm-up.js';

const REQUESTS = envInteger('PROFILE_REQUESTS', 2000);
const STREAMS = envInteger('PROFILE_STREAMS', 300);
const CONCURRENCY = envInteger('PROFILE_CONCURRENCY', 4);
const TOP = envInteger('PROFILE_TOP', 25);
const CPU_ONLY = process.env.PROFILE_CPU_ONLY === '1';
/** Messages of history before each JSON chat's question (scenarios.ts history; 0: the bench's one-line chat). */
const TURNS = envInteger('PROFILE_TURNS', 0, 0);
const SLICED = process.env.PROFILE_SLICED === '1';
const ROUNDS = envInteger('PROFILE_ROUNDS', CPU_ONLY ? 3 : 1);
/** Sampling interval: 200 µs gives five times the samples of the default (1 ms) for a few per cent more overhead. */
const INTERVAL_US = envInteger('PROFILE_INTERVAL_US', 200);
/** Seconds of JSON and then stream load at 16 connections first, so the profile sees optimized code (warm-up.ts). */
const LOAD_WARMUP = envInteger('PROFILE_LOAD_WARMUP_SECONDS', LOAD_WARMUP_SECONDS, 0);
const ALIAS = 'svc-core';

interface CallFrame {
  readonly functionName: string;
  readonly url: string;
  readonly lineNumber: number;
}
interface ProfileNode {
  readonly id: number;
  readonly callFrame: CallFrame;
  readonly children?: number[];
}
interface CpuProfile {
  readonly nodes: ProfileNode[];
  readonly startTime: number;
  readonly samples: number[];
  readonly timeDeltas: number[];
}

/** What a frame is, from its script and name; null: a V8 builtin or Node internal (counts for its caller). */
export function categoryOf(f: CallFrame): string | null {
  const u = f.url;
  if (f.functionName === '(garbage collector)') return 'GC';
  if (f.functionName === '(program)') return 'V8/native (program)';
  if (f.functionName === '(idle)' || f.functionName === '(root)') return 'idle';
  if (/@grpc\/grpc-js/.test(u) || /node:internal\/http2|node:http2/.test(u)) return 'grpc-js / http2';
  if (/generated\/google\/protobuf\/struct/.test(u)) return 'Struct decoding';
  if (/sidecar\/src\/generated|@bufbuild\/protobuf|processing-request-decode/.test(u)) return 'protobuf codec';
  if (/node_modules\/(pino|sonic-boom|fast-redact|thread-stream|pino-std-serializers|quick-format-unescaped|atomic-sleep|on-exit-leak-free)/.test(u))
    return 'pino logging';
  if (/node_modules\/(ioredis|redis-errors|redis-parser|denque|cluster-key-slot|standard-as-callback)/.test(u)) return 'ioredis';
  if (/node_modules\/zod/.test(u)) return 'zod';
  if (/node_modules\/prom-client/.test(u)) return 'metrics (prom-client)';
  if (/sidecar\/src\/adapters\/(fast-metrics|metrics)/.test(u)) return 'metrics (ours)';
  if (/sidecar\/src\/adapters\/logger/.test(u)) return 'pino logging';
  if (/sidecar\/src\/store/.test(u)) return 'store (ours)';
  if (/sidecar\/src\/domain\/sse/.test(u)) return 'SSE (ours)';
  if (/sidecar\/src\/domain/.test(u)) return 'domain (ours)';
  if (/sidecar\/src/.test(u)) return 'adapters (ours)';
  if (/node_modules/.test(u)) return `npm ${/node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(u)?.[1] ?? '?'}`;
  return null;
}

/** Builtins named like JSON's: counted as JSON wherever they are called from. */
const JSON_BUILTINS = new Set(['parse', 'stringify', 'JSONParse', 'JSONStringify']);
/** Native writes to a socket, pipe or file: the system call runs on the main thread, so its cost shows here. */
const WRITE_BUILTINS = new Set(['writeUtf8String', 'writeLatin1String', 'writeAsciiString', 'writeBuffer', 'writev', 'writeString', 'writeUcs2String']);

export interface ProfileSummary {
  readonly totalMs: number;
  readonly byFunction: Array<{ name: string; where: string; category: string; ms: number }>;
  readonly byCategory: Array<{ category: string; ms: number }>;
}

/** Self time of the samples taken in [fromUs, toUs] (monotonic µs), by function and by category. */
export function summarise(p: CpuProfile, fromUs: number, toUs: number): ProfileSummary {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const ownerCache = new Map<number, string>();
  const owner = (id: number): string => {
    const cached = ownerCache.get(id);
    if (cached) return cached;
    const n = byId.get(id)!;
    let cat = categoryOf(n.callFrame);
    if (cat === null && n.callFrame.url === '' && JSON_BUILTINS.has(n.callFrame.functionName)) cat = 'JSON parse/stringify';
    if (cat === null) {
      const up = parent.get(id);
      const inherited = up === undefined ? 'node runtime' : owner(up);
      cat = inherited === 'idle' ? `node runtime` : inherited;
      if (n.callFrame.url === '' && WRITE_BUILTINS.has(n.callFrame.functionName)) cat = `write syscalls (${cat.replace(/^write syscalls \((.*)\)$/, '$1')})`;
    }
    ownerCache.set(id, cat);
    return cat;
  };
  const selfUs = new Map<number, number>();
  let t = p.startTime;
  for (let i = 0; i < p.samples.length; i++) {
    t += p.timeDeltas[i] ?? 0;
    if (t < fromUs || t > toUs) continue;
    const id = p.samples[i]!;
    selfUs.set(id, (selfUs.get(id) ?? 0) + (p.timeDeltas[i + 1] ?? 0));
  }
  const fn = new Map<string, { name: string; where: string; category: string; ms: number }>();
  const cat = new Map<string, number>();
  let total = 0;
  for (const [id, us] of selfUs) {
    const n = byId.get(id)!;
    const c = owner(id);
    if (c === 'idle' && (n.callFrame.functionName === '(idle)' || n.callFrame.functionName === '(root)')) continue;
    total += us;
    cat.set(c, (cat.get(c) ?? 0) + us);
    // tsx's output keeps no line numbers worth printing for our TypeScript files.
    const file = n.callFrame.url.replace(/^.*?(node_modules\/|sidecar\/src\/)/, '$1');
    const where = !file ? '(builtin)' : file.endsWith('.ts') ? file : `${file}:${n.callFrame.lineNumber + 1}`;
    const key = `${n.callFrame.functionName}|${where}`;
    const e = fn.get(key) ?? { name: n.callFrame.functionName || '(anonymous)', where, category: c, ms: 0 };
    e.ms += us / 1000;
    fn.set(key, e);
  }
  return {
    totalMs: total / 1000,
    byFunction: [...fn.values()].sort((a, b) => b.ms - a.ms),
    byCategory: [...cat.entries()].map(([category, us]) => ({ category, ms: us / 1000 })).sort((a, b) => b.ms - a.ms),
  };
}

function procCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * 10; // CLK_TCK 100 on Linux
}

const nowUs = () => Number(process.hrtime.bigint() / 1000n);

async function parallel(n: number, make: () => { run: () => Promise<void>; close: () => void }): Promise<void> {
  const workers = Array.from({ length: CONCURRENCY }, () => make());
  let left = n;
  await Promise.all(
    workers.map(async (w) => {
      while (left > 0) {
        left--;
        await w.run();
      }
      w.close();
    }),
  );
}

async function main(): Promise<void> {
  const profDir = mkdtempSync(join(tmpdir(), 'gw-profile-'));
  const spec = GATEWAY_VARIANTS.credit;
  const config = process.env.PROFILE_CONFIG ? mergeConfig(spec.options.config ?? {}, JSON.parse(process.env.PROFILE_CONFIG) as Record<string, unknown>) : spec.options.config;
  const store = process.env.PROFILE_STORE === 'memory' ? 'memory' : spec.options.store;
  const gw = await startGateway({ ...spec.options, store, config, nodeArgs: CPU_ONLY ? {} : { sidecar: ['--cpu-prof', '--cpu-prof-interval', String(INTERVAL_US), '--cpu-prof-dir', profDir] } });
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await gw.stop();
  };
  process.on('SIGINT', () => void stop().finally(() => process.exit(130)));
  try {
    await gw.admin.adjustCredits(gw.tenantId, CREDIT_GRANT, 'profile-grant', 'profile');
    const sidecarPid = gw.stack.process('sidecar').pid!;
    const headers = { 'content-type': 'application/json', 'x-api-key': gw.key };
    const url = `${gw.base}/chat/completions`;
    let failures = 0;
    const json = () => {
      const c = new SequentialClient({ url, method: 'POST', headers, body: chatBody(ALIAS, TURNS) });
      return {
        run: async () => {
          const r = await c.one().catch(() => ({ status: 0 }));
          if (r.status !== 200) failures++;
        },
        close: () => c.close(),
      };
    };
    let events = 0;
    const stream = () => {
      const spec = { url, method: 'POST', headers, body: streamBody(ALIAS, STREAM_TOKENS, 0) };
      const c = new StreamClient(SLICED ? { ...spec, bodyOf: (n) => streamBody(ALIAS, STREAM_TOKENS, 0, true, n + 1) } : spec, () => null);
      return {
        run: async () => {
          const r = await c.one().catch(() => ({ status: 0, body: '' }));
          if (r.status !== 200) failures++;
          else events += countDataEvents(r.body);
        },
        close: () => c.close(),
      };
    };
    // Warm-up (JIT, connections), not counted: load first, then the workers' own connections.
    await warmUnderLoad({ url, method: 'POST', headers, body: chatBody(ALIAS, TURNS) }, 16, LOAD_WARMUP);
    await warmUnderLoad({ url, method: 'POST', headers, body: streamBody(ALIAS, STREAM_TOKENS, 0) }, 16, LOAD_WARMUP, (status, _body, n) =>
      status === 200 && n > 0 ? null : `status ${status}, ${n} events`,
    );
    await parallel(Math.min(1000, REQUESTS), json);
    await parallel(Math.min(100, STREAMS), stream);
    events = 0;

    const out: string[] = [];
    out.push(`sidecar ${CPU_ONLY ? 'CPU' : 'profile'}: store ${store ?? 'memory'}, credit check on, ${CONCURRENCY} connections${SLICED ? ', sliced streams' : ''}${process.env.PROFILE_CONFIG ? `, config ${process.env.PROFILE_CONFIG}` : ''}`);
    let t0 = 0;
    let t1 = 0;
    let t2 = 0;
    for (let round = 1; round <= ROUNDS; round++) {
      events = 0;
      t0 = nowUs();
      const c0 = procCpuMs(sidecarPid);
      await parallel(REQUESTS, json);
      t1 = nowUs();
      const c1 = procCpuMs(sidecarPid);
      await parallel(STREAMS, stream);
      t2 = nowUs();
      const c2 = procCpuMs(sidecarPid);
      const perReq = (c1 - c0) / REQUESTS;
      const perStream = (c2 - c1) / STREAMS;
      const eventsPerStream = events / STREAMS;
      out.push(
        `sidecar CPU${CPU_ONLY ? '' : ' (/proc, while profiled)'}: ${fmt(perReq)} ms per JSON chat (${REQUESTS}), ${fmt(perStream)} ms per stream (${STREAMS} x ${fmt(eventsPerStream, 0)} events), ` +
          `${fmt((perStream - perReq) / Math.max(1, eventsPerStream - 1), 4)} ms per streamed event beyond a JSON chat; failures ${failures}`,
      );
    }
    await stop();
    if (CPU_ONLY) {
      process.stdout.write(out.join('\n') + '\n');
      return;
    }

    const file = readdirSync(profDir).find((f) => f.endsWith('.cpuprofile'));
    if (!file) throw new Error(`no .cpuprofile in ${profDir} (did the sidecar exit cleanly?)`);
    const profile = JSON.parse(readFileSync(join(profDir, file), 'utf8')) as CpuProfile;
    for (const [label, from, to, n] of [
      // The last round's windows.
      ['JSON chats', t0, t1, REQUESTS],
      ['streams', t1, t2, STREAMS],
    ] as const) {
      const s = summarise(profile, from, to);
      out.push('', `== ${label}: ${fmt(s.totalMs, 0)} ms of samples, ${fmt((s.totalMs / n) * 1000, 0)} µs per ${label === 'streams' ? 'stream' : 'request'} ==`);
      out.push(
        table(
          ['category (self time; builtins count for their caller)', '%', 'µs per ' + (label === 'streams' ? 'stream' : 'req')],
          s.byCategory.map((c) => [c.category, fmt((100 * c.ms) / s.totalMs, 1), fmt((c.ms / n) * 1000, 1)]),
        ),
      );
      out.push(
        '',
        table(
          ['function (self time)', 'where', 'category', '%', 'µs per ' + (label === 'streams' ? 'stream' : 'req')],
          s.byFunction.slice(0, TOP).map((f) => [f.name, f.where, f.category, fmt((100 * f.ms) / s.totalMs, 1), fmt((f.ms / n) * 1000, 1)]),
          3,
        ),
      );
    }
    process.stdout.write(out.join('\n') + '\n');
    if (process.env.PROFILE_KEEP === '1') process.stdout.write(`profile kept: ${join(profDir, file)}\n`);
  } finally {
    await stop();
    if (process.env.PROFILE_KEEP !== '1') rmSync(profDir, { recursive: true, force: true });
  }
}

await main();
