/**
 * Where a sliced stream's time goes: the same sliced streams (same slice seeds)
 * straight from the simulator, through bare Envoy, through the floor (the
 * gateway's Envoy on the no-op sidecar) and through the gateway (Redis store,
 * credit check on), in turn, one at a time. Prints, p50 over the streams:
 *
 *   - when the client had each complete event (first events, middle, last);
 *   - from each Envoy's access log: how long the provider took to write its
 *     stream as that Envoy received it (first to last byte), and what the
 *     Envoy and its sidecar added at each end (first and last byte to the
 *     caller minus first and last byte from the provider).
 *
 * On a 2-core box the provider (a Node process writing one slice a
 * millisecond on a timer) shares the CPU with Envoy and the sidecar, which
 * work on every slice, so its timers fire late. Its slices fall due on a
 * fixed clock (simulator/slices.ts), so a late one does not delay the rest:
 * the access-log row "provider wrote its stream" should read about the same
 * for every target; where it does not, that part of a later [DONE] is the
 * box, not the gateway.
 *
 *   npx tsx test/bench/stream-timeline.ts     TIMELINE_STREAMS (default 40, measured)
 *                                             TIMELINE_WARMUP (default 100): streams per target, in turn at
 *                                             one connection as the measured ones, before them (a path served
 *                                             one request at a time compiles for its first thousands: warm-up.ts)
 *                                             TIMELINE_TOKENS (default 32)
 *                                             TIMELINE_LOAD_WARMUP_SECONDS (default 5): sliced streams at
 *                                             16 connections to every target first (warm-up.ts; 0: none)
 *                                             TIMELINE_ALL_EVENTS=1: a column for every event, not seven
 */
import { request } from 'node:http';
import { installCleanupHandlers, startTargets, stopTargets } from './targets.js';
import { streamBody } from './scenarios.js';
import { envInteger, fmt, table } from './report.js';
import { LOAD_WARMUP_SECONDS, warmUnderLoad } from './warm-up.js';

const STREAMS = envInteger('TIMELINE_STREAMS', 40, 1);
const TOKENS = envInteger('TIMELINE_TOKENS', 32, 6);
const WARMUP = envInteger('TIMELINE_WARMUP', 100, 0);
const LOAD_WARMUP = envInteger('TIMELINE_LOAD_WARMUP_SECONDS', LOAD_WARMUP_SECONDS, 0);
const ALL_EVENTS = process.env.TIMELINE_ALL_EVENTS === '1';

/** Milliseconds from the request's first byte to each complete SSE event. */
function eventTimes(url: string, headers: Record<string, string>, body: string): Promise<number[]> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const times: number[] = [];
    let buf = '';
    const req = request(url, { method: 'POST', headers: { ...headers, 'content-length': Buffer.byteLength(body) } }, (res) => {
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        buf += d;
        for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
          times.push(performance.now() - t0);
          buf = buf.slice(i + 2);
        }
      });
      res.on('end', () => resolve(times));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? NaN;
};

installCleanupHandlers();
const t = await startTargets({ variants: ['credit'] });
try {
  const credit = t.variant('credit');
  /** The bench's sliced stream request (scenarios.ts), cut by `seed`. */
  const body = (model: string, seed: number) => streamBody(model, TOKENS, 0, true, seed);
  const internal = credit.gateway.config.models.find((f) => f.alias === 'svc-core')!.model;
  const provider = { authorization: `Bearer ${t.upstreamKey}` };
  const targets = [
    { label: 'provider alone', url: `${credit.gateway.config.upstream.baseUrl}/chat/completions`, headers: provider, model: internal, envoy: null },
    { label: 'bare Envoy', url: `${t.bareUrl}/v1/chat/completions`, headers: provider, model: internal, envoy: t.bareUrl },
    { label: 'floor', url: `${t.floorUrl}/v1/chat/completions`, headers: provider, model: internal, envoy: t.floorUrl },
    { label: 'gateway (Redis, credit check)', url: `${credit.base}/chat/completions`, headers: { 'x-api-key': credit.key }, model: 'svc-core', envoy: credit.base },
  ];
  for (const target of targets) {
    const spec = { url: target.url, method: 'POST', headers: { 'content-type': 'application/json', ...target.headers }, bodyOf: (n: number) => body(target.model, n + 1) };
    await warmUnderLoad(spec, 16, LOAD_WARMUP, (status) => (status === 200 ? null : `status ${status}`));
  }
  const runs: number[][][] = targets.map(() => []);
  for (let seed = 1; seed <= WARMUP + STREAMS; seed++) {
    for (const [i, target] of targets.entries()) {
      const times = await eventTimes(target.url, { 'content-type': 'application/json', ...target.headers }, body(target.model, seed));
      if (seed > WARMUP) runs[i]!.push(times);
    }
  }
  await new Promise((r) => setTimeout(r, 300)); // the last access-log lines
  const events = Math.min(...runs.flat().map((r) => r.length));
  const cols = ALL_EVENTS ? Array.from({ length: events }, (_, i) => i) : [0, 1, 2, Math.floor(events / 2), events - 3, events - 2, events - 1];
  const measured = STREAMS;
  process.stdout.write(`sliced streams of ${TOKENS} tokens, ${measured} each, same seeds, in turn; ms from the request to each complete event (p50)\n`);
  process.stdout.write(
    `${table(
      ['', ...cols.map((c) => (c === events - 1 ? `event ${c + 1} ([DONE])` : `event ${c + 1}`))],
      targets.map((target, i) => [target.label, ...cols.map((c) => fmt(median(runs[i]!.map((r) => r[c]!))))]),
    )}\n\n`,
  );

  const logOf = (url: string) =>
    t
      .envoyLines(url)
      .flatMap((l) => {
        try {
          const j = JSON.parse(l) as Record<string, unknown>;
          return typeof j.upstream_rx_last_us === 'number' && typeof j.downstream_tx_last_us === 'number' ? [j as Record<string, number>] : [];
        } catch {
          return [];
        }
      })
      .slice(-measured);
  const withLog = targets.filter((x) => x.envoy !== null);
  const logs = withLog.map((x) => logOf(x.envoy!));
  const us = (i: number, f: (j: Record<string, number>) => number) => fmt(median(logs[i]!.map(f)) / 1000);
  const row = (what: string, f: (j: Record<string, number>) => number) => [what, ...withLog.map((_, i) => us(i, f))];
  process.stdout.write(`from each Envoy's access log of its last ${measured} streams, ms (p50):\n`);
  process.stdout.write(
    `${table(
      ['what', ...withLog.map((x) => x.label)],
      [
        row('request first byte -> provider request sent', (j) => j.upstream_tx_us!),
        row('request first byte -> provider first byte', (j) => j.upstream_rx_first_us!),
        row('request first byte -> provider last byte', (j) => j.upstream_rx_last_us!),
        row('request first byte -> caller last byte', (j) => j.downstream_tx_last_us!),
        row('provider wrote its stream (its first to last byte, as Envoy received them)', (j) => j.upstream_rx_last_us! - j.upstream_rx_first_us!),
        row('added at the start (caller first byte - provider first byte)', (j) => j.downstream_tx_first_us! - j.upstream_rx_first_us!),
        row('added at the end (caller last byte - provider last byte)', (j) => j.downstream_tx_last_us! - j.upstream_rx_last_us!),
      ],
    )}\n`,
  );
  const gap = (from: number) => targets.map((target, i) => `${target.label} ${fmt(median(runs[i]!.map((r) => r[events - 1]! - r[from]!)))}`).join(', ');
  process.stdout.write(`per stream, from event ${events - 3} to [DONE], ms (p50): ${gap(events - 4)}\n`);
  process.stdout.write(`per stream, from event 1 to [DONE], ms (p50): ${gap(0)}\n`);
  const alone = median(runs[0]!.map((r) => r[events - 1]! - r[0]!));
  process.stdout.write(`provider alone, first to last event at the client: ${fmt(alone)} ms\n`);
} finally {
  await stopTargets();
}
