import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { buildAdminServer, MIN_ADMIN_TOKEN_LENGTH } from '../../sidecar/src/adapters/admin/server.js';
import { createMemoryLedger } from '../../sidecar/src/store/memory-ledger.js';
import { createMemoryStore } from '../../sidecar/src/store/memory.js';

const deps = (adminToken: string) => ({ store: createMemoryStore(), ledger: createMemoryLedger(), brand: 'svc', currency: 'CHF', adminToken, log: pino({ level: 'silent' }) });

describe('the operator API token', () => {
  it('an empty or short token (an empty token file) refuses to build the API instead of guarding nothing', () => {
    for (const t of ['', ' ', 'x'.repeat(MIN_ADMIN_TOKEN_LENGTH - 1)]) expect(() => buildAdminServer(deps(t))).toThrow(/admin token/);
  });

  it('guards every operator route; the right bearer passes', async () => {
    const token = 'a'.repeat(MIN_ADMIN_TOKEN_LENGTH);
    const app = buildAdminServer(deps(token));
    for (const authorization of [undefined, 'Bearer ', `Bearer ${token}x`]) {
      const r = await app.inject({ method: 'GET', url: '/admin/tenants', headers: authorization === undefined ? {} : { authorization } });
      expect(r.statusCode).toBe(401);
    }
    const ok = await app.inject({ method: 'GET', url: '/admin/tenants', headers: { authorization: `Bearer ${token}` } });
    expect(ok.statusCode).toBe(200);
    await app.close();
  });
});

describe('readiness', () => {
  it('is ready only when both the key store and the ledger answer', async () => {
    const token = 'b'.repeat(MIN_ADMIN_TOKEN_LENGTH);
    const up = buildAdminServer(deps(token));
    expect((await up.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    const ledger = createMemoryLedger();
    await ledger.close(); // the ledger's connection is gone, the key store's is not
    const down = buildAdminServer({ ...deps(token), ledger });
    const r = await down.inject({ method: 'GET', url: '/readyz' });
    expect(r.statusCode).toBe(503);
    await up.close();
    await down.close();
  });
});
