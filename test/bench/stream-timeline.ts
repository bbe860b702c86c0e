/**
 * Where a sliced stream's time goes: the same sliced streams (same slice seeds)
 * through the gateway (Redis store, credit check on) and straight from the
 * simulator, alternating, one at a time. Prints, p50 over the streams:
 *
 *   - when the client had each complete event (first events, middle, last);
 *   - from Envoy's access log of the gateway's streams: how long the provider
 *     took to write its stream as Envoy received it (first to last byte), and
 *     what the gateway added at each end (Envoy's first and last byte to the
 *     caller minus its first and last byte from the provider).
 *
 * On a 2-core box the provider (a Node process writing one slice a
 * millisecond on a timer) shares the CPU with Envoy and the sidecar, which
 * work on every slice: its timers fire later and its stream takes longer
 * through the gateway than alone. That part of the gateway's later [DONE] is
 * the box, not the gateway; the access-log columns separate the two.
 *
 *   npx tsx test/bench/stream-timeline.ts     TIMELINE_STREAMS (default 40; the first 5 warm up)
 *                                             TIMELINE_TOKENS (default 32)
 */
import { request } from 'node:http';
import { startGateway } from '../harness/gateway.js';
import { CREDIT_GRANT, GATEWAY_VARIANTS } from './targets.js';
import { USER_MESSAGE } from './scenarios.js';
import { fmt, table } from './report.js';

const num = (name: string, dflt: number) => {
  const v = Number(process.env[name] ?? dflt);
  if (!Number.isInteger(v) || v <= 5) throw new Error(`${name} must be an integer above 5`);
  return v;
};
const STREAMS = num('TIMELINE_STREAMS', 40);
const TOKENS = num('TIMELINE_TOKENS', 32);
const WARMUP = 5;

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

const gw = await startGateway({ ...GATEWAY_VARIANTS.credit.options });
try {
  await gw.admin.adjustCredits(gw.tenantId, CREDIT_GRANT, 'timeline-grant', 'timeline');
  const body = (model: string, seed: number) =>
    JSON.stringify({
      model,
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: `${USER_MESSAGE} #sim:tokens=${TOKENS} #sim:chunk-delay=0 #sim:slice-seed=${seed}` }],
    });
  const internal = gw.config.models.find((f) => f.alias === 'svc-core')!.model;
  const runs: Record<'gateway' | 'provider', number[][]> = { gateway: [], provider: [] };
  for (let seed = 1; seed <= STREAMS; seed++) {
    const g = await eventTimes(`${gw.base}/chat/completions`, { 'content-type': 'application/json', 'x-api-key': gw.key }, body('svc-core', seed));
    const d = await eventTimes(`${gw.config.upstream.baseUrl}/chat/completions`, { 'content-type': 'application/json', authorization: `Bearer ${gw.upstreamKey}` }, body(internal, seed));
    if (seed > WARMUP) {
      runs.gateway.push(g);
      runs.provider.push(d);
    }
  }
  const events = Math.min(...[...runs.gateway, ...runs.provider].map((r) => r.length));
  const cols = [0, 1, 2, Math.floor(events / 2), events - 3, events - 2, events - 1];
  const rows = (['provider', 'gateway'] as const).map((who) => [who === 'provider' ? 'provider alone' : 'through the gateway', ...cols.map((c) => fmt(median(runs[who].map((r) => r[c]!))))]);
  process.stdout.write(`sliced streams of ${TOKENS} tokens, ${STREAMS - WARMUP} each, same seeds; ms from the request to each complete event (p50)\n`);
  process.stdout.write(`${table(['', ...cols.map((c) => (c === events - 1 ? `event ${c + 1} ([DONE])` : `event ${c + 1}`))], rows)}\n\n`);

  const log = gw.stack
    .process('envoy')
    .lines.flatMap((l) => {
      try {
        const j = JSON.parse(l) as Record<string, unknown>;
        return typeof j.upstream_rx_last_us === 'number' && j.route !== undefined ? [j as Record<string, number>] : [];
      } catch {
        return [];
      }
    })
    .slice(-(STREAMS - WARMUP));
  const us = (f: (j: Record<string, number>) => number) => fmt(median(log.map(f)) / 1000);
  process.stdout.write(`from Envoy's access log of the gateway's last ${log.length} streams, ms (p50):\n`);
  process.stdout.write(
    `${table(
      ['what', 'ms'],
      [
        ['provider wrote its stream (its first to last byte, as Envoy received them)', us((j) => j.upstream_rx_last_us! - j.upstream_rx_first_us!)],
        ['gateway added at the start (caller first byte - provider first byte)', us((j) => j.downstream_tx_first_us! - j.upstream_rx_first_us!)],
        ['gateway added at the end (caller last byte - provider last byte)', us((j) => j.downstream_tx_last_us! - j.upstream_rx_last_us!)],
      ],
    )}\n`,
  );
  const alone = median(runs.provider.map((r) => r[events - 1]! - r[0]!));
  process.stdout.write(`provider alone, first to last event at the client: ${fmt(alone)} ms\n`);
} finally {
  await gw.stop();
}
