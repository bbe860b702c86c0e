/**
 * CPU of rewriting one provider embeddings answer alone (parse, check, the
 * alias and svc block, the list written out; no gRPC, no Envoy): 16 vectors
 * of 1,536 numbers, and a full batch of EMBEDDINGS_MICRO_INPUTS (default 256)
 * vectors of 3,584 (the simulator's size, about 18 MB). From 512 bytes up the
 * vectors go out as the provider's own bytes (embeddings-response.ts).
 * Deterministic enough to compare one change; the largest case is also the
 * sidecar's longest synchronous step, which Envoy's PING timeout must allow.
 *
 *   npx tsx test/bench/embeddings-micro.ts      EMBEDDINGS_MICRO_ITER (default 50) rewrites of the small answer, in 5 rounds
 */
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { admitEmbeddings } from '../../sidecar/src/domain/embeddings-request.js';
import { rewriteEmbeddings } from '../../sidecar/src/domain/embeddings-response.js';
import { envInteger, fmt } from './report.js';

const ITER = envInteger('EMBEDDINGS_MICRO_ITER', 50);
const BATCH = envInteger('EMBEDDINGS_MICRO_INPUTS', 256);
const ROUNDS = 5;
const catalog = new Catalog(parseConfig(defaultConfig('svc')).models, 'svc');

/** A provider's answer of `n` vectors of `dims` numbers (a seeded sequence: the same bytes every run). */
function answer(n: number, dims: number): Buffer {
  let seed = 1;
  const next = () => ((seed = (seed * 16807) % 2147483647) / 2147483647 - 0.5) / 5;
  const data = Array.from({ length: n }, (_, index) => ({ object: 'embedding', index, embedding: Array.from({ length: dims }, next) }));
  return Buffer.from(JSON.stringify({ object: 'list', model: 'sim-embed-1', data, usage: { prompt_tokens: n, total_tokens: n } }));
}

for (const [n, dims, iter] of [
  [16, 1536, ITER],
  [BATCH, 3584, 2],
] as const) {
  const admitted = admitEmbeddings({ model: 'svc-embed', input: Array.from({ length: n }, (_, i) => `text ${i}`) }, catalog, n);
  if (!admitted.ok) throw new Error('refused');
  const raw = answer(n, dims);
  let sink = 0;
  const once = () => {
    const r = rewriteEmbeddings(raw, admitted.ctx, 'req-micro', 'svc');
    if (!r.ok) throw new Error('not rewritten');
    sink += r.body.length;
  };
  once();
  // The best of ROUNDS rounds: the least disturbed by whatever else the machine runs.
  let best = Infinity;
  for (let round = 0; round < ROUNDS; round++) {
    const c0 = process.cpuUsage();
    for (let i = 0; i < iter; i++) once();
    const cpu = process.cpuUsage(c0);
    best = Math.min(best, (cpu.user + cpu.system) / iter);
  }
  process.stdout.write(`embeddings answer, ${n} x ${dims} (${fmt(raw.length / 1024, 0)} KiB): ${fmt(best / 1000, 2)} ms CPU each (best of ${ROUNDS} rounds of ${iter}; ${sink > 0 ? 'ok' : '?'})\n`);
}
