/**
 * CPU per streamed event of the stream rewriter alone (no gRPC, no Envoy):
 * a simulator-shaped stream of STREAM_TOKENS content chunks, usage and [DONE],
 * cut into reads of the size Envoy forwards them in, rewritten many times.
 * Deterministic enough to compare one change (unlike CPU under load).
 *
 *   npx tsx test/bench/sse-micro.ts      SSE_MICRO_ITER (default 20000) streams, in 10 rounds
 */
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { admitChat } from '../../sidecar/src/domain/chat-request.js';
import { ChatStreamRewriter } from '../../sidecar/src/domain/sse/chat-stream.js';
import { STREAM_TOKENS } from './scenarios.js';

const ITER = Number(process.env.SSE_MICRO_ITER ?? 20000);
const cfg = parseConfig(defaultConfig('svc'));
const catalog = new Catalog(cfg.models, cfg.brand);
const admitted = admitChat({ model: 'svc-core', stream: true, messages: [{ role: 'user', content: 'hi' }] }, catalog, { defaultTemperature: 0.7 });
if (!admitted.ok) throw new Error('refused');
const ctx = admitted.ctx;

// The simulator's framing (sidecar/simulator/chat-stream.ts).
const head = `data: {"id":"chatcmpl-sim-123456","object":"chat.completion.chunk","created":1700000000,"model":"sim-core-1","system_fingerprint":"fp_sim","choices":[{"index":0,"delta":`;
const tail = `,"logprobs":null,"finish_reason":null}]}\n\n`;
let text = `${head}{"role":"assistant","content":""}${tail}`;
for (let i = 0; i < STREAM_TOKENS; i++) text += `${head}{"content":"word${i} "}${tail}`;
text += `data: {"id":"chatcmpl-sim-123456","object":"chat.completion.chunk","created":1700000000,"model":"sim-core-1","system_fingerprint":"fp_sim","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}\n\n`;
text += `data: {"id":"chatcmpl-sim-123456","object":"chat.completion.chunk","created":1700000000,"model":"sim-core-1","system_fingerprint":"fp_sim","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":${STREAM_TOKENS},"total_tokens":${9 + STREAM_TOKENS}}}\n\n`;
text += 'data: [DONE]\n\n';
const events = text.split('\n\n').length - 1;
const whole = Buffer.from(text);
// Seven reads of uneven size, cut anywhere (as the bench's client sees them arrive).
const reads: Buffer[] = [];
for (let i = 0, k = 0; i < whole.length; k++) {
  const n = Math.ceil(whole.length / 7) + (k % 2 ? 37 : -37);
  reads.push(whole.subarray(i, i + n));
  i += n;
}

function once(): number {
  const r = new ChatStreamRewriter(ctx, 'req-123', 'svc', 12, 1_700_000_000);
  let n = 0;
  for (const b of reads) n += r.push(b).length;
  return n + r.end().length;
}

for (let i = 0; i < 2000; i++) once();
// The best of ROUNDS rounds: the least disturbed by whatever else the machine runs.
const ROUNDS = 10;
let best = Infinity;
let sink = 0;
for (let round = 0; round < ROUNDS; round++) {
  const c0 = process.cpuUsage();
  for (let i = 0; i < ITER / ROUNDS; i++) sink += once();
  const cpu = process.cpuUsage(c0);
  best = Math.min(best, (cpu.user + cpu.system) / (ITER / ROUNDS) / events);
}
process.stdout.write(`stream rewriter: ${events} events in ${reads.length} reads; ${best.toFixed(3)} µs CPU per event (best of ${ROUNDS} rounds of ${ITER / ROUNDS} streams; ${sink > 0 ? 'ok' : '?'})\n`);
