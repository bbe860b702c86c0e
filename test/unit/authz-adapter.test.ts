// The ext_authz adapter over real gRPC: the IP allowlist is decided by the
// connection's source (the client), never its destination (the gateway's own
// listener). Over loopback both are the same address, so only a CheckRequest
// whose two differ can tell them apart.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { credentials, makeGenericClientConstructor, type ServiceError } from '@grpc/grpc-js';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAuthorizationService } from '../../sidecar/src/adapters/envoy/authz-service.js';
import { startGrpcServer } from '../../sidecar/src/adapters/grpc-server.js';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { Authorizer } from '../../sidecar/src/domain/auth/authorize.js';
import { generateApiKey, hashApiKey } from '../../sidecar/src/domain/auth/keys.js';
import { SettlementJournal } from '../../sidecar/src/domain/billing/journal.js';
import { Billing } from '../../sidecar/src/domain/billing/service.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { Gate } from '../../sidecar/src/domain/gate.js';
import { AuthorizationService, CheckRequest, type CheckResponse } from '../../sidecar/src/generated/envoy/service/auth/v3/external_auth.js';
import type { KeyRecord } from '../../sidecar/src/store/contract.js';
import { createMemoryLedger } from '../../sidecar/src/store/memory-ledger.js';
import { until } from '../harness/until.js';

const CLIENT = '203.0.113.7';
const LISTENER = '198.51.100.20';

const cfg = parseConfig(defaultConfig('svc'));
const keys = new Map<string, KeyRecord>();
function newKey(allowedIps: string[] | null): string {
  const key = generateApiKey('svc');
  const id = `key_${keys.size + 1}`;
  keys.set(hashApiKey(key), {
    id, tenantId: 'ten_1', hash: hashApiKey(key), last4: key.slice(-4), name: id,
    scopes: ['ai'], allowedIps, status: 'active', createdAt: '2026-01-01T00:00:00Z', revokedAt: null,
  });
  return key;
}

let dir: string;
let server: { close: () => Promise<void> };
let check: (req: CheckRequest) => Promise<CheckResponse>;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'authz-'));
  const authorizer = new Authorizer({ brand: 'svc', findKey: async (h) => keys.get(h) ?? null, verifySession: async () => null });
  const billing = new Billing(createMemoryLedger(), cfg.billing, new SettlementJournal(join(dir, 'journal.jsonl')), { settled: () => {}, failed: () => {} });
  const catalog = new Catalog(cfg.models, 'svc');
  const gate = new Gate(authorizer, billing, { catalog, defaultTemperature: 0.7, maxEmbeddingInputs: 256, maxRequestBytes: 1 << 20 }, '/v1', cfg.limits.maxRequestHeaders);
  const address = `unix:${join(dir, 'sock')}`;
  const authz = createAuthorizationService({ gate, brand: 'svc', upstreamKey: undefined, log: pino({ level: 'silent' }) });
  server = await startGrpcServer(address, { authz, extProc: { process: () => {} } as never });
  const Client = makeGenericClientConstructor(AuthorizationService as never, 'Authorization');
  const client = new Client(address, credentials.createInsecure()) as unknown as {
    check(req: CheckRequest, cb: (err: ServiceError | null, res: CheckResponse) => void): void;
  };
  check = (req) => new Promise((resolve, reject) => client.check(req, (err, res) => (err ? reject(err) : resolve(res))));
});
afterAll(async () => {
  await server?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** GET /v1/models with the key, from `source` to `destination`, as Envoy describes the connection. */
const fromTo = (key: string, source: string, destination: string) =>
  CheckRequest.fromPartial({
    attributes: {
      source: { address: { socketAddress: { address: source, portValue: 40_000 } } },
      destination: { address: { socketAddress: { address: destination, portValue: 8080 } } },
      request: { http: { method: 'GET', path: '/v1/models', headers: { 'x-api-key': key, 'x-request-id': 'req-ip' } } },
    },
  });

const statusOf = (r: CheckResponse) => (r.status?.code === 0 ? 200 : r.deniedResponse?.status?.code);

describe('ext_authz adapter: the allowlist reads the source address', () => {
  it('a key listing the client address passes; the same key from another client is refused', async () => {
    const key = newKey([CLIENT]);
    expect(statusOf(await check(fromTo(key, CLIENT, LISTENER)))).toBe(200);
    const refused = await check(fromTo(key, '192.0.2.50', LISTENER));
    expect(statusOf(refused)).toBe(401);
    expect(JSON.parse(refused.deniedResponse?.body ?? '{}').error.code).toBe('invalid_api_key');
  });

  it('a key listing only the gateway listener address is refused to a client connecting to it', async () => {
    const key = newKey([LISTENER]);
    expect(statusOf(await check(fromTo(key, CLIENT, LISTENER)))).toBe(401);
    const range = newKey(['198.51.100.0/24']);
    expect(statusOf(await check(fromTo(range, CLIENT, LISTENER)))).toBe(401);
  });

  it('no source address reported: a key with an allowlist is refused, one without passes', async () => {
    const noSource = (key: string) =>
      CheckRequest.fromPartial({
        attributes: {
          destination: { address: { socketAddress: { address: LISTENER, portValue: 8080 } } },
          request: { http: { method: 'GET', path: '/v1/models', headers: { 'x-api-key': key, 'x-request-id': 'req-ip' } } },
        },
      });
    expect(statusOf(await check(noSource(newKey([LISTENER]))))).toBe(401);
    expect(statusOf(await check(noSource(newKey(null))))).toBe(200);
  });
});

describe('ext_authz adapter: a check Envoy stopped waiting for', () => {
  const PERIOD = () => new Date().toISOString().slice(0, 7);
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  /** A chat request with a key, as Envoy sends it with the body. */
  const chat = (key: string, requestId: string) =>
    CheckRequest.fromPartial({
      attributes: {
        source: { address: { socketAddress: { address: CLIENT, portValue: 40_000 } } },
        request: {
          http: {
            method: 'POST',
            path: '/v1/chat/completions',
            headers: { 'x-api-key': key, 'x-request-id': requestId, 'content-type': 'application/json' },
            body: JSON.stringify({ model: 'svc-quick', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] }),
          },
        },
      },
    });

  it('gives the hold back at once when the answer comes after the deadline; a timely one keeps it for response processing', async () => {
    const sub = mkdtempSync(join(tmpdir(), 'authz-late-'));
    const ledger = createMemoryLedger();
    await ledger.adjustBalance('ten_1', 1_000_000, 'grant-ten_1', 'grant', Date.now());
    const billing = new Billing(ledger, { ...cfg.billing, creditLease: { ...cfg.billing.creditLease, enabled: false } }, // direct holds, seen in the ledger
      new SettlementJournal(join(sub, 'journal.jsonl')), { settled: () => {}, failed: () => {} });
    const authorizer = new Authorizer({ brand: 'svc', findKey: async (h) => keys.get(h) ?? null, verifySession: async () => null });
    const gate = new Gate(authorizer, billing, { catalog: new Catalog(cfg.models, 'svc'), defaultTemperature: 0.7, maxEmbeddingInputs: 256, maxRequestBytes: 1 << 20 }, '/v1', cfg.limits.maxRequestHeaders);
    // The gate finishes (and places the hold) 300 ms after the call arrives; the late one's 1.5 s, past its
    // 1 s deadline (long enough for the call to reach the server first, even on a loaded box).
    const slowGate = {
      check: async (r: Parameters<Gate['check']>[0]) => (await sleep(r.requestId === 'req-late' ? 1_500 : 300), gate.check(r)),
      authenticate: gate.authenticate.bind(gate),
    } as unknown as Gate;
    const released: string[] = [];
    const authz = createAuthorizationService({
      gate: slowGate,
      brand: 'svc',
      upstreamKey: undefined,
      log: pino({ level: 'silent' }),
      abandoned: (rid) => {
        released.push(rid);
        void billing.releaseAbandoned(rid);
      },
    });
    const address = `unix:${join(sub, 'sock')}`;
    const srv = await startGrpcServer(address, { authz, extProc: { process: () => {} } as never });
    const Client = makeGenericClientConstructor(AuthorizationService as never, 'Authorization');
    const client = new Client(address, credentials.createInsecure()) as unknown as {
      check(req: CheckRequest, opts: { deadline: number }, cb: (err: ServiceError | null, res: CheckResponse) => void): void;
      close(): void;
      waitForReady(deadline: number, cb: (err?: Error) => void): void;
    };
    const call = (req: CheckRequest, deadlineMs: number) =>
      new Promise<ServiceError | CheckResponse>((resolve) => client.check(req, { deadline: Date.now() + deadlineMs }, (err, res) => resolve(err ?? res)));
    try {
      const key = newKey(null);
      // Connected first: the deadline is then all the call's own.
      await new Promise<void>((resolve, reject) => client.waitForReady(Date.now() + 5_000, (err) => (err ? reject(err) : resolve())));
      const late = await call(chat(key, 'req-late'), 1_000);
      expect((late as ServiceError).code).toBe(4); // DEADLINE_EXCEEDED: Envoy would answer 503
      await until('the late check to finish', () => released.length > 0);
      expect(released).toEqual(['req-late']);
      expect((await ledger.account('ten_1', PERIOD())).held).toBe(0);

      const timely = await call(chat(key, 'req-timely'), 5_000);
      expect(statusOf(timely as CheckResponse)).toBe(200);
      await sleep(100);
      expect(released).toEqual(['req-late']);
      // Kept for the claim (ext_proc), released only after the claim grace period.
      expect((await ledger.account('ten_1', PERIOD())).held).toBeGreaterThan(0);
      await billing.releaseAllUnclaimed();
      expect((await ledger.account('ten_1', PERIOD())).held).toBe(0);
    } finally {
      client.close();
      await srv.close();
      rmSync(sub, { recursive: true, force: true });
    }
  });
});
