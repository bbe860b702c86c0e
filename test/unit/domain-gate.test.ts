/** The front gate (ext_authz's domain): header limits, the key check, billing-off 404s, body limits, admission and the credit hold. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import type { AdmissionPolicy } from '../../sidecar/src/domain/admission.js';
import { AdmissionCache } from '../../sidecar/src/domain/admission-cache.js';
import { Authorizer } from '../../sidecar/src/domain/auth/authorize.js';
import { generateApiKey, hashApiKey } from '../../sidecar/src/domain/auth/keys.js';
import { SettlementJournal } from '../../sidecar/src/domain/billing/journal.js';
import { Billing } from '../../sidecar/src/domain/billing/service.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { Gate, MAX_CLIENT_HEADER_BYTES, type GateOutcome, type GateRequest } from '../../sidecar/src/domain/gate.js';
import type { KeyRecord } from '../../sidecar/src/store/contract.js';
import type { Ledger } from '../../sidecar/src/store/ledger-contract.js';
import { createMemoryLedger } from '../../sidecar/src/store/memory-ledger.js';

const cfg = parseConfig(defaultConfig('svc'));
const KEY = generateApiKey('svc');
const TENANT = 'ten_gate';
const record: KeyRecord = {
  id: 'key_gate', tenantId: TENANT, hash: hashApiKey(KEY), last4: KEY.slice(-4), name: 'k',
  scopes: ['ai'], allowedIps: null, status: 'active', createdAt: '2026-01-01T00:00:00Z', revokedAt: null,
};
const MAX_HEADERS = 100;
const MAX_BODY = 4096;

let dir: string;
let ledger: Ledger;
let lookups: number;
let admissions: AdmissionCache;
let policy: AdmissionPolicy;

function gate(opts: { creditCheck?: boolean; billingEnabled?: boolean } = {}) {
  const authorizer = new Authorizer({
    brand: 'svc',
    findKey: async (hash) => {
      lookups += 1;
      return hash === record.hash ? record : null;
    },
    verifySession: async () => null,
  });
  const billing = new Billing(ledger, { ...cfg.billing, creditCheck: opts.creditCheck ?? false }, new SettlementJournal(join(dir, 'journal.jsonl')), { settled: () => {}, failed: () => {} });
  return new Gate(authorizer, billing, () => policy, '/v1', MAX_HEADERS, admissions, { billingEnabled: opts.billingEnabled ?? false });
}

const request = (over: Partial<GateRequest> & { headers?: Record<string, string> } = {}): GateRequest => {
  const headers: Record<string, string> = { 'x-api-key': KEY, ...over.headers };
  return {
    path: '/v1/chat/completions',
    method: 'POST',
    peer: '10.0.0.1',
    header: (n: string) => headers[n],
    headerCount: 3,
    headerBytes: 200,
    body: null,
    requestId: 'req-1',
    ...over,
  };
};
const chat = (extra: Record<string, unknown> = {}) => Buffer.from(JSON.stringify({ model: 'svc-quick', messages: [{ role: 'user', content: 'hi' }], ...extra }));
const status = (o: GateOutcome) => (o.ok ? 200 : o.error.entry.status);
const held = async () => (await ledger.account(TENANT, new Date().toISOString().slice(0, 7))).held;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'gate-'));
  ledger = createMemoryLedger();
  lookups = 0;
  admissions = new AdmissionCache();
  policy = { catalog: new Catalog(cfg.models, 'svc'), defaultTemperature: 0.7, maxEmbeddingInputs: 256, maxRequestBytes: MAX_BODY };
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('header limits (431, before the key is looked up or anything is held)', () => {
  it('at the limits: served; one header more or one byte more: 431 naming the limits', async () => {
    const g = gate();
    expect(status(await g.check(request({ headerCount: MAX_HEADERS, headerBytes: MAX_CLIENT_HEADER_BYTES, body: chat() })))).toBe(200);
    const lookupsBefore = lookups;
    for (const over of [{ headerCount: MAX_HEADERS + 1 }, { headerBytes: MAX_CLIENT_HEADER_BYTES + 1 }]) {
      const o = await g.check(request({ ...over, body: chat(), requestId: 'req-431' }));
      expect(o.ok).toBe(false);
      if (o.ok) continue;
      expect(o.error.entry.status).toBe(431);
      expect(o.error.entry.code).toBe('request_headers_too_large');
      expect(o.error.message).toContain(`at most ${MAX_HEADERS} headers of ${MAX_CLIENT_HEADER_BYTES / 1024} KiB`);
    }
    expect(lookups).toBe(lookupsBefore);
  });

  it('the header-only key check applies the same limits', async () => {
    const g = gate();
    expect(status(await g.authenticate(request({ headerCount: MAX_HEADERS + 1 })))).toBe(431);
    expect(status(await g.authenticate(request({ headerBytes: MAX_CLIENT_HEADER_BYTES + 1 })))).toBe(431);
    expect(lookups).toBe(0);
  });
});

describe('the header-only key check (a large or unsized body, before it is buffered)', () => {
  it('a valid key: the principal, nothing held, nothing admitted', async () => {
    const o = await gate({ creditCheck: true }).authenticate(request());
    expect(o).toEqual({ ok: true, principal: expect.objectContaining({ tenantId: TENANT, keyId: 'key_gate' }), inference: null });
    expect(await held()).toBe(0);
  });

  it('an unknown or missing key: 401', async () => {
    expect(status(await gate().authenticate(request({ headers: { 'x-api-key': generateApiKey('svc') } })))).toBe(401);
    const none = { path: '/v1/models', peer: null, header: () => undefined, headerCount: 0, headerBytes: 0 };
    expect(status(await gate().authenticate(none))).toBe(401);
  });
});

describe('the full check', () => {
  it('a refused key stops everything: 401, nothing held', async () => {
    const o = await gate({ creditCheck: true }).check(request({ headers: { 'x-api-key': generateApiKey('svc') }, body: chat() }));
    expect(status(o)).toBe(401);
    expect(await held()).toBe(0);
    expect(admissions.size).toBe(0);
  });

  it('billing off: /credits and anything under it is 404 billing-not-enabled; other account paths and billing on are not', async () => {
    for (const path of ['/v1/credits', '/v1/credits/tiers', '/v1/credits?x=1']) {
      const o = await gate().check(request({ path, method: 'GET' }));
      expect(o.ok).toBe(false);
      if (!o.ok) expect(o.error.entry.message).toBe('Billing is not enabled on this deployment.');
    }
    expect(status(await gate({ billingEnabled: true }).check(request({ path: '/v1/credits', method: 'GET' })))).toBe(200);
    expect(status(await gate().check(request({ path: '/v1/accounts/usage', method: 'GET' })))).toBe(200);
  });

  it('a body above the limit: 413 in the inference envelope, or the account one on account paths; at the limit it is read', async () => {
    const big = Buffer.alloc(MAX_BODY + 1, 0x20);
    const inference = await gate().check(request({ body: big }));
    expect(inference.ok).toBe(false);
    if (!inference.ok) expect(inference.error.entry.code).toBe('request_too_large');
    const account = await gate({ billingEnabled: true }).check(request({ path: '/v1/credits/top-ups', body: big }));
    expect(account.ok).toBe(false);
    if (!account.ok) expect(account.error.entry.code).toBe('VAL_001');
    // Exactly the limit: not refused for its size (it is not JSON, so admission answers 400).
    const atLimit = await gate().check(request({ body: Buffer.alloc(MAX_BODY, 0x20) }));
    expect(status(atLimit)).toBe(400);
  });

  it('the limit is read from the live policy at each check (a reload applies at once)', async () => {
    const g = gate();
    const body = chat({ padding: 'x'.repeat(200) });
    expect(status(await g.check(request({ body })))).toBe(200);
    policy = { ...policy, maxRequestBytes: body.length - 1 };
    expect(status(await g.check(request({ body, requestId: 'req-2' })))).toBe(413);
  });

  it('a path without a body endpoint (models): the principal, no admission, nothing held', async () => {
    const o = await gate({ creditCheck: true }).check(request({ path: '/v1/models', method: 'GET' }));
    expect(o).toEqual({ ok: true, principal: expect.objectContaining({ tenantId: TENANT }), inference: null });
    expect(await held()).toBe(0);
  });

  it('an invalid chat body: 400 naming the field, nothing held or cached', async () => {
    const o = await gate({ creditCheck: true }).check(request({ body: chat({ temperature: 9 }) }));
    expect(o.ok).toBe(false);
    if (!o.ok) {
      expect(o.error.entry.status).toBe(400);
      expect(o.error.param).toBe('temperature');
    }
    expect(await held()).toBe(0);
    expect(admissions.size).toBe(0);
  });

  it('a valid chat: the worst case held, the flow and the upstream size returned, the admission cached for ext_proc', async () => {
    await ledger.adjustBalance(TENANT, 10_000_000, 'grant-1', 'test', Date.now());
    const body = chat({ stream: true });
    const o = await gate({ creditCheck: true }).check(request({ body }));
    expect(o.ok).toBe(true);
    if (!o.ok || !o.inference) throw new Error('expected an admitted inference');
    expect(o.inference.stream).toBe(true);
    expect(o.inference.held).toBeGreaterThan(0);
    expect(await held()).toBe(o.inference.held);
    // The decision travels with the admission: ext_proc here need not read Envoy's copy.
    expect(admissions.decisionOf('req-1')).toEqual({ principal: o.principal, held: o.inference.held, leased: o.inference.leased, lease: o.inference.lease });
    const admitted = admissions.take('req-1', body);
    expect(admitted).toBeDefined();
    expect(o.inference.upstreamBytes).toBe(admitted!.upstreamBody.length);
    expect(JSON.parse(admitted!.upstreamBody.toString()).stream_options).toEqual({ include_usage: true });
  });

  it('a gate built with a fixed policy and no admission cache serves the same', async () => {
    const authorizer = new Authorizer({ brand: 'svc', findKey: async (hash) => (hash === record.hash ? record : null), verifySession: async () => null });
    const billing = new Billing(ledger, cfg.billing, new SettlementJournal(join(dir, 'journal.jsonl')), { settled: () => {}, failed: () => {} });
    const fixed = new Gate(authorizer, billing, policy, '/v1', MAX_HEADERS);
    const o = await fixed.check(request({ body: chat() }));
    expect(o.ok && o.inference?.stream).toBe(false);
    expect(status(await fixed.check(request({ body: Buffer.alloc(MAX_BODY + 1, 0x20) })))).toBe(413);
    // Billing is off unless the deployment says otherwise.
    expect(status(await fixed.check(request({ path: '/v1/credits', method: 'GET' })))).toBe(404);
  });

  it('a balance that does not cover the worst case: 402, nothing held, nothing cached', async () => {
    const o = await gate({ creditCheck: true }).check(request({ body: chat() }));
    expect(status(o)).toBe(402);
    expect(await held()).toBe(0);
    expect(admissions.size).toBe(0);
  });
});
