/**
 * The gateway beside the peers issue 11 compares it with, in one interleaved
 * run on this box against one simulator: the provider itself, bare Envoy,
 * this gateway (Redis store, credit check on: keys, holds, metering, the
 * setting issue 11 judges; and with the in-memory store, as `npm start`
 * runs it without Redis), the Portkey OSS gateway (Node) and the LiteLLM
 * proxy (Python). The peers run with less governance than ours, as in the
 * issue's table: no keys, no metering (Portkey with the provider and host in
 * headers; LiteLLM with one model in its config, no master key, no
 * database).
 *
 * The floor (the gateway's own Envoy configuration on a sidecar that does
 * nothing, test/bench/null-sidecar.ts) shows what the architecture costs
 * before any gateway code runs.
 *
 * Per target, interleaved in rounds (the order rotates each round): JSON
 * chat at one connection (p50 and p99 added over the provider), JSON chat at
 * 16 connections (req/s, autocannon), a 32-token stream at one connection
 * (first complete event p50, `[DONE]` added over the provider) and streams
 * per second at 16 connections (every stream read to `[DONE]`).
 *
 * The peers are installed on first use into .tools/peers/ (pinned: Portkey
 * gateway PORTKEY_VERSION from npm, LiteLLM LITELLM_SPEC into a Python
 * venv): not project dependencies.
 *
 * Before the rounds every target is warmed up as `npm run bench` warms its
 * own: PEERS_LOAD_WARMUP_SECONDS of JSON chats at 16 connections, then
 * PEERS_WARMUP chats and a tenth as many streams one at a time (a Node
 * process, ours or Portkey, keeps compiling the paths one connection takes
 * for the first 2,000 to 3,000 requests: jit-settle.ts).
 *
 *   npx tsx test/bench/peers.ts     PEERS (default "portkey,litellm"), PEERS_ROUNDS (3),
 *                                   PEERS_REQUESTS (300 JSON chats per target and round),
 *                                   PEERS_STREAMS (60 per target and round), PEERS_SECONDS (4, each
 *                                   16-connection run), PEERS_CONNECTIONS (16),
 *                                   PEERS_WARMUP (2500), PEERS_LOAD_WARMUP_SECONDS (5)
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { ManagedProcess } from '../../sidecar/stack/process.js';
import { REPO_ROOT } from '../../sidecar/stack/paths.js';
import { freePort } from '../harness/ports.js';
import { SequentialClient, StreamClient, emptySample, emptyStreamSample, latencyStats, type RequestSpec, type StreamSample, type LatencySample } from './latency.js';
import { chatBody, streamBody, STREAM_TOKENS } from './scenarios.js';
import { streamLoad } from './stream-load.js';
import { installCleanupHandlers, startTargets, stopTargets, type Targets } from './targets.js';
import { envInteger, fmt, table } from './report.js';
import { LOAD_WARMUP_SECONDS, warmUnderLoad } from './warm-up.js';

const PORTKEY_VERSION = '1.15.2';
const LITELLM_SPEC = 'litellm[proxy]==1.99.4';
const INTERNAL_MODEL = 'sim-core-1';
const ALIAS = 'svc-core';

const ROUNDS = envInteger('PEERS_ROUNDS', 3);
const REQUESTS = envInteger('PEERS_REQUESTS', 300);
const STREAMS = envInteger('PEERS_STREAMS', 60);
const SECONDS = envInteger('PEERS_SECONDS', 4);
const CONNECTIONS = envInteger('PEERS_CONNECTIONS', 16);
const WARMUP = envInteger('PEERS_WARMUP', 2500, 0);
const LOAD_WARMUP = envInteger('PEERS_LOAD_WARMUP_SECONDS', LOAD_WARMUP_SECONDS, 0);
const PEERS = (process.env.PEERS ?? 'portkey,litellm').split(',').map((p) => p.trim()).filter(Boolean);
for (const p of PEERS) if (p !== 'portkey' && p !== 'litellm') throw new Error(`PEERS: unknown peer ${p} (portkey, litellm)`);

const PEERS_DIR = join(REPO_ROOT, '.tools', 'peers');

/** Installs a peer on first use (a clear line says what and where). */
function install(peer: 'portkey' | 'litellm'): string {
  if (peer === 'portkey') {
    const dir = join(PEERS_DIR, `portkey-${PORTKEY_VERSION}`);
    const entry = join(dir, 'node_modules', '@portkey-ai', 'gateway', 'build', 'start-server.js');
    if (!existsSync(entry)) {
      console.log(`peers: installing the Portkey gateway ${PORTKEY_VERSION} into ${dir} (npm)`);
      mkdirSync(dir, { recursive: true });
      execFileSync('npm', ['install', '--no-save', '--no-package-lock', '--no-audit', '--no-fund', '--prefix', dir, `@portkey-ai/gateway@${PORTKEY_VERSION}`], { stdio: 'inherit' });
    }
    return entry;
  }
  const dir = join(PEERS_DIR, 'litellm-' + LITELLM_SPEC.replace(/[^a-z0-9.]+/gi, '-'));
  const bin = join(dir, 'bin', 'litellm');
  if (!existsSync(bin)) {
    console.log(`peers: installing ${LITELLM_SPEC} into ${dir} (a Python venv, pip)`);
    execFileSync('python3', ['-m', 'venv', dir], { stdio: 'inherit' });
    execFileSync(join(dir, 'bin', 'pip'), ['install', '--quiet', LITELLM_SPEC], { stdio: 'inherit' });
  }
  return bin;
}

interface Target {
  readonly name: string;
  readonly json: RequestSpec;
  readonly stream: RequestSpec;
  /** The provider's own time is subtracted from this target's latency (the provider: none). */
  readonly isProvider?: boolean;
}

async function waitHttp(url: string, proc: ManagedProcess, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (!proc.running) throw new Error(`${proc.name} exited before it was ready\n${proc.lines.slice(-20).join('\n')}`);
    try {
      const r = await fetch(url);
      if (r.status < 500) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${proc.name} not ready after ${timeoutMs} ms\n${proc.lines.slice(-20).join('\n')}`);
}

const jsonHeaders = { 'content-type': 'application/json' };
const spec = (url: string, headers: Record<string, string>, body: string): RequestSpec => ({ url, method: 'POST', headers: { ...jsonHeaders, ...headers }, body });
const stream = (model: string) => streamBody(model, STREAM_TOKENS, 0);

async function startPortkey(t: Targets, stops: Array<() => Promise<void>>): Promise<Target> {
  const entry = install('portkey');
  const port = await freePort();
  const proc = new ManagedProcess('portkey', process.execPath, [entry, `--port=${port}`, '--headless'], { env: { ...process.env, NODE_ENV: 'production' }, keep: 200 });
  stops.push(() => proc.stop());
  await waitHttp(`http://127.0.0.1:${port}/`, proc, 30_000);
  const headers = { 'x-portkey-provider': 'openai', 'x-portkey-custom-host': `${t.simulatorUrl}/v1`, authorization: `Bearer ${t.upstreamKey}` };
  const url = `http://127.0.0.1:${port}/v1/chat/completions`;
  return { name: `Portkey OSS gateway ${PORTKEY_VERSION}`, json: spec(url, headers, chatBody(INTERNAL_MODEL)), stream: spec(url, headers, stream(INTERNAL_MODEL)) };
}

async function startLitellm(t: Targets, stops: Array<() => Promise<void>>, dir: string): Promise<Target> {
  const bin = install('litellm');
  const port = await freePort();
  const config = join(dir, 'litellm.yaml');
  writeFileSync(
    config,
    [
      'model_list:',
      `  - model_name: ${ALIAS}`,
      '    litellm_params:',
      `      model: openai/${INTERNAL_MODEL}`,
      `      api_base: ${t.simulatorUrl}/v1`,
      `      api_key: ${t.upstreamKey}`,
      'litellm_settings:',
      '  telemetry: false',
      '',
    ].join('\n'),
  );
  const proc = new ManagedProcess('litellm', bin, ['--config', config, '--host', '127.0.0.1', '--port', String(port), '--num_workers', '1'], {
    env: { ...process.env, LITELLM_LOG: 'ERROR', LITELLM_TELEMETRY: 'False', NO_DOCS: 'True' },
    keep: 200,
  });
  stops.push(() => proc.stop());
  await waitHttp(`http://127.0.0.1:${port}/health/liveliness`, proc, 120_000);
  const url = `http://127.0.0.1:${port}/v1/chat/completions`;
  return { name: `LiteLLM proxy ${LITELLM_SPEC.split('==')[1]}`, json: spec(url, {}, chatBody(ALIAS)), stream: spec(url, {}, stream(ALIAS)) };
}

/** A whole stream: 2xx, and `data: [DONE]` last (the peers may frame a stream's events differently). */
const streamWhole = (_status: number, body: string): string | null => (body.trimEnd().endsWith('data: [DONE]') ? null : `stream did not end with [DONE]: ...${body.slice(-200)}`);

interface Result {
  json: LatencySample;
  streams: StreamSample;
  rps: number[];
  streamsPerS: number[];
  failures: number;
  firstProblem: string | null;
}

async function rate(req: RequestSpec): Promise<{ rps: number; failures: number }> {
  const opts = { url: req.url, method: 'POST' as const, headers: { ...req.headers }, body: req.body, connections: CONNECTIONS };
  await autocannon({ ...opts, duration: 1 });
  const r = await autocannon({ ...opts, duration: SECONDS });
  return { rps: r.requests.total / r.duration, failures: r.non2xx + r.errors + r.timeouts };
}

async function measure(target: Target, into: Result): Promise<void> {
  const c = new SequentialClient(target.json);
  await c.run(Math.ceil(REQUESTS / 10)); // warm-up, unmeasured
  await c.run(REQUESTS, into.json);
  c.close();
  const s = new StreamClient(target.stream, streamWhole);
  await s.run(Math.ceil(STREAMS / 10));
  await s.run(STREAMS, into.streams);
  s.close();
  const r = await rate(target.json);
  into.rps.push(r.rps);
  into.failures += r.failures;
  const load = await streamLoad(target.stream, streamWhole, CONNECTIONS, SECONDS);
  into.streamsPerS.push(load.sample.doneMs.length / load.durationS);
  into.failures += load.sample.non2xx + load.sample.errors + load.sample.bad;
  into.firstProblem ??= into.json.firstProblem ?? into.streams.firstProblem ?? load.sample.firstProblem;
}

const median = (xs: readonly number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? (s.length % 2 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2) : NaN;
};

async function main(): Promise<number> {
  const uninstall = installCleanupHandlers();
  const stops: Array<() => Promise<void>> = [];
  try {
    const t = await startTargets({ variants: ['credit'] });
    const credit = t.variant('credit');
    const provider = { url: `${t.simulatorUrl}/v1/chat/completions`, headers: { authorization: `Bearer ${t.upstreamKey}` } };
    const bare = { url: `${t.bareUrl}/v1/chat/completions`, headers: { authorization: `Bearer ${t.upstreamKey}` } };
    const floor = { url: `${t.floorUrl}/v1/chat/completions`, headers: { authorization: `Bearer ${t.upstreamKey}` } };
    const ours = { url: `${credit.base}/chat/completions`, headers: { 'x-api-key': credit.key } };
    const targets: Target[] = [
      { name: 'provider (simulator)', json: spec(provider.url, provider.headers, chatBody(INTERNAL_MODEL)), stream: spec(provider.url, provider.headers, stream(INTERNAL_MODEL)), isProvider: true },
      { name: `bare Envoy ${t.envoyVersion}`, json: spec(bare.url, bare.headers, chatBody(INTERNAL_MODEL)), stream: spec(bare.url, bare.headers, stream(INTERNAL_MODEL)) },
      { name: 'floor (the gateway\'s Envoy, a do-nothing sidecar)', json: spec(floor.url, floor.headers, chatBody(INTERNAL_MODEL)), stream: spec(floor.url, floor.headers, stream(INTERNAL_MODEL)) },
      { name: 'this gateway (Redis, credit check on)', json: spec(ours.url, ours.headers, chatBody(ALIAS)), stream: spec(ours.url, ours.headers, stream(ALIAS)) },
      { name: 'this gateway (memory store)', json: spec(`${t.gatewayBase}/chat/completions`, { 'x-api-key': t.gatewayKey }, chatBody(ALIAS)), stream: spec(`${t.gatewayBase}/chat/completions`, { 'x-api-key': t.gatewayKey }, stream(ALIAS)) },
    ];
    if (PEERS.includes('portkey')) targets.push(await startPortkey(t, stops));
    if (PEERS.includes('litellm')) targets.push(await startLitellm(t, stops, mkdtempSync(join(tmpdir(), 'peers-'))));
    // Each target answers once before anything is measured (a broken set-up fails here, not in a table).
    for (const target of targets) {
      const r = await new SequentialClient(target.json).one();
      if (r.status !== 200) throw new Error(`${target.name}: HTTP ${r.status}: ${r.body.slice(0, 300)}`);
    }
    for (const target of targets) {
      console.log(`peers: warm-up: ${target.name}`);
      await warmUnderLoad(target.json, CONNECTIONS, LOAD_WARMUP);
      const c = new SequentialClient(target.json);
      await c.run(WARMUP);
      c.close();
      const s = new StreamClient(target.stream, streamWhole);
      await s.run(Math.ceil(WARMUP / 10));
      s.close();
    }
    const results = new Map<Target, Result>(targets.map((x) => [x, { json: emptySample(), streams: emptyStreamSample(), rps: [], streamsPerS: [], failures: 0, firstProblem: null }]));
    for (let round = 0; round < ROUNDS; round++) {
      const order = targets.map((_, i) => targets[(i + round) % targets.length]!);
      for (const target of order) {
        console.log(`peers: round ${round + 1}/${ROUNDS}: ${target.name}`);
        await measure(target, results.get(target)!);
      }
    }
    const providerResult = results.get(targets[0]!)!;
    const p = latencyStats(providerResult.json.okMs);
    const ps = latencyStats(providerResult.streams.doneMs);
    const rows = targets.map((target) => {
      const r = results.get(target)!;
      const j = latencyStats(r.json.okMs);
      const fe = latencyStats(r.streams.firstEventMs);
      const done = latencyStats(r.streams.doneMs);
      const added = (v: number, base: number) => (target.isProvider ? fmt(v, 2) : Number.isFinite(v - base) ? `${v >= base ? '+' : '−'}${fmt(Math.abs(v - base), 2)}` : 'n/a');
      return [
        target.name,
        added(j.p50, p.p50),
        added(j.p99, p.p99),
        fmt(median(r.rps), 0),
        fmt(fe.p50, 2),
        added(done.p50, ps.p50),
        fmt(median(r.streamsPerS), 0),
        String(r.failures + r.json.non2xx + r.json.errors + r.streams.non2xx + r.streams.errors + r.streams.bad),
      ];
    });
    console.log(`\nOne interleaved run, ${ROUNDS} rounds, medians of rounds for the rates; JSON ${REQUESTS} and streams ${STREAMS} per target and round at one connection, ${SECONDS} s per rate at ${CONNECTIONS} connections; a ${STREAM_TOKENS}-token stream.`);
    console.log(
      table(
        ['target', 'JSON c=1 p50 (added over the provider), ms', 'JSON c=1 p99 (added), ms', `JSON c=${CONNECTIONS} req/s`, 'stream c=1 first complete event p50, ms', 'stream c=1 [DONE] p50 (added), ms', `streams/s c=${CONNECTIONS}`, 'failures'],
        rows,
      ),
    );
    for (const target of targets) {
      const problem = results.get(target)!.firstProblem;
      if (problem) console.log(`${target.name}: first problem: ${problem}`);
    }
    return 0;
  } finally {
    for (const stop of stops.reverse()) await stop().catch(() => {});
    await stopTargets();
    uninstall();
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
