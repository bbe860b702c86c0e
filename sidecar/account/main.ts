/**
 * The account service as its own process (deployments, Redis store):
 *   GATEWAY_CONFIG=gateway.yaml tsx sidecar/account/main.ts [--host H] [--port N]
 * It reads the gateway's configuration (the same file the sidecar reads) and
 * works on the same Redis: keys, the ledger's atomic scripts, the account
 * records. With the embedded memory store the sidecar runs it in its own
 * process instead (a separate process could not share that memory).
 */
import { parseArgs } from 'node:util';
import { loadConfigOrExit } from '../src/config/load.js';
import { closeLogger, createLogger } from '../src/adapters/logger.js';
import { createAccountStore, createLedger, createStore } from '../src/store/create.js';
import { createBroadcast, createKeyEvents } from '../src/store/key-events.js';
import { LEASE_RECALL_TOPIC } from '../src/domain/billing/lease-recall.js';
import { createAutoTopupTrigger } from '../src/store/auto-topup-trigger.js';
import { buildAccountService } from './server.js';
import { paymentsFromConfig } from './payments/from-config.js';

const { values } = parseArgs({ options: { port: { type: 'string' }, host: { type: 'string' } } });
const cfg = loadConfigOrExit();
if (cfg.store.kind !== 'redis') {
  process.stderr.write('the account service runs as its own process only with the Redis store; with the memory store the sidecar serves it\n');
  process.exit(2);
}
const log = createLogger(cfg.log.level, `${cfg.brand}-account`);
const store = createStore(cfg);
const ledger = createLedger(cfg);
const accounts = createAccountStore(cfg);
const trigger = createAutoTopupTrigger(cfg, ledger);
const broadcast = createBroadcast(cfg);
const keyEvents = createKeyEvents(cfg, broadcast);
const app = buildAccountService({
  cfg,
  store,
  ledger,
  accounts,
  trigger,
  payments: paymentsFromConfig(cfg),
  log,
  onKeyRevoked: (hash) => keyEvents.publish(hash),
  recallLeases: (workspaceId) => broadcast.publish(LEASE_RECALL_TOPIC, workspaceId),
});
const url = new URL(cfg.accountService.url);
await app.listen({ port: Number(values.port ?? url.port), host: values.host ?? url.hostname });
const port = (app.server.address() as { port: number }).port;
process.stdout.write(`${JSON.stringify({ event: 'listening', port })}\n`);
const stop = async () => {
  await app.close();
  await Promise.all([store.close(), ledger.close(), accounts.close(), trigger.close(), keyEvents.close()]);
  closeLogger(log);
  process.exit(0);
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
