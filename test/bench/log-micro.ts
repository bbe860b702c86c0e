/**
 * CPU of one per-request log line (the sidecar's `request` line, as
 * sidecar/src/main.ts writes it) through the sidecar's logger. The lines go
 * to stdout (the logger's destination), the result to stderr: send stdout
 * to /dev/null. Deterministic enough to compare one change.
 *
 *   npx tsx test/bench/log-micro.ts > /dev/null      LOG_MICRO_ITER (default 20000) lines per round, 5 rounds
 */
import { createLogger } from '../../sidecar/src/adapters/logger.js';

const ITER = Number(process.env.LOG_MICRO_ITER ?? 20000);
const ROUNDS = 5;
const log = createLogger('info', 'svc-sidecar');
const line = {
  request_id: '0b8f2c1e-4c7d-4a52-9d0e-6f1b2a3c4d5e',
  method: 'POST',
  path: '/v1/chat/completions',
  status: 200,
  upstream_status: 200,
  outcome: 'ok',
  code: undefined,
  tenant_id: 'ten_0123456789',
  key_id: 'key_0123456789',
  alias: 'svc-core',
  stream: false,
  request_count: undefined,
  prompt_tokens: 12,
  completion_tokens: 34,
  usage_estimated: false,
};
for (let i = 0; i < ITER; i++) log.info({ ...line }, 'request');
let best = Infinity;
for (let round = 0; round < ROUNDS; round++) {
  const c0 = process.cpuUsage();
  for (let i = 0; i < ITER; i++) log.info({ ...line }, 'request');
  const cpu = process.cpuUsage(c0);
  best = Math.min(best, (cpu.user + cpu.system) / ITER);
}
process.stderr.write(`per-request log line: ${best.toFixed(2)} µs CPU each (best of ${ROUNDS} rounds of ${ITER})\n`);
