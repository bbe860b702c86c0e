/**
 * CPU of one chat admission alone (parse, validate, price the prompt and
 * serialise the upstream body; no gRPC, no Envoy), for the bench's one-line
 * prompt, for conversations of 1, 2 and 4 turns and of ADMISSION_MICRO_TURNS
 * turns (default 20) of about 600 characters each (from 512 bytes up the
 * messages go upstream as the caller's bytes: upstream-body.ts).
 * Deterministic enough to compare one change.
 *
 *   npx tsx test/bench/admission-micro.ts      ADMISSION_MICRO_ITER (default 20000) admissions per prompt, in 10 rounds
 */
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { admitBody } from '../../sidecar/src/domain/admission.js';
import { LiveConfig } from '../../sidecar/src/domain/live-config.js';
import { USER_MESSAGE, history } from './scenarios.js';

const ITER = Number(process.env.ADMISSION_MICRO_ITER ?? 20000);
const TURNS = Number(process.env.ADMISSION_MICRO_TURNS ?? 20);
const policy = new LiveConfig(parseConfig(defaultConfig('svc'))).current.admission;

const conversation = (turns: number) => Buffer.from(JSON.stringify({ model: 'svc-core', messages: history(turns) }));
const bodies: Record<string, Buffer> = {
  'one line': Buffer.from(JSON.stringify({ model: 'svc-core', messages: [{ role: 'user', content: USER_MESSAGE }] })),
  ...Object.fromEntries([1, 2, 4, TURNS].map((n) => [`${n} turn${n > 1 ? 's' : ''}`, conversation(n)])),
};

const ROUNDS = 10;
for (const [name, body] of Object.entries(bodies)) {
  let sink = 0;
  const once = () => {
    const a = admitBody('chat', 'POST', body, policy);
    if (!a.ok) throw new Error(`refused: ${a.error.entry.code}`);
    sink += a.ctx.promptBytes;
  };
  for (let i = 0; i < 2000; i++) once();
  // The best of ROUNDS rounds: the least disturbed by whatever else the machine runs.
  let best = Infinity;
  for (let round = 0; round < ROUNDS; round++) {
    const c0 = process.cpuUsage();
    for (let i = 0; i < ITER / ROUNDS; i++) once();
    const cpu = process.cpuUsage(c0);
    best = Math.min(best, (cpu.user + cpu.system) / (ITER / ROUNDS));
  }
  process.stdout.write(`chat admission, ${name} (${body.length} bytes): ${best.toFixed(2)} µs CPU each (best of ${ROUNDS} rounds of ${ITER / ROUNDS}; ${sink > 0 ? 'ok' : '?'})\n`);
}
