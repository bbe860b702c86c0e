import { parseArgs } from 'node:util';
import { buildAccountService } from './server.js';

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '8081' },
    host: { type: 'string', default: '127.0.0.1' },
    billing: { type: 'boolean', default: false },
    brand: { type: 'string', default: 'svc' },
  },
});
const app = buildAccountService({ billingEnabled: values.billing ?? false, brand: values.brand ?? 'svc' });
await app.listen({ port: Number(values.port), host: values.host });
const port = (app.server.address() as { port: number }).port;
process.stdout.write(`${JSON.stringify({ event: 'listening', port })}\n`);
const stop = async () => {
  await app.close();
  process.exit(0);
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
