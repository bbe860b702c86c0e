/**
 * The payment simulator as a process:
 *   tsx sidecar/payments/main.ts --port 0 --host 127.0.0.1
 * Prints `{"event":"listening","port":N}` when ready.
 */
import { parseArgs } from 'node:util';
import { createPaymentSimulator } from './simulator.js';

const { values } = parseArgs({ options: { port: { type: 'string', default: '0' }, host: { type: 'string', default: '127.0.0.1' } } });
const app = createPaymentSimulator();
await app.listen({ port: Number(values.port), host: values.host });
process.stdout.write(`${JSON.stringify({ event: 'listening', port: (app.server.address() as { port: number }).port })}\n`);
const stop = async () => {
  await app.close();
  process.exit(0);
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
