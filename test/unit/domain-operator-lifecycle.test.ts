/** Operator actions on tenants and keys (the admin API's domain), and the instance's lifecycle (drain). */
import { describe, expect, it } from 'vitest';
import { hashApiKey, keyPrefix } from '../../sidecar/src/domain/auth/keys.js';
import { Lifecycle } from '../../sidecar/src/domain/lifecycle.js';
import { createTenant, issueKey, keyView, OperatorError, revokeKey } from '../../sidecar/src/domain/operator.js';
import { createMemoryStore } from '../../sidecar/src/store/memory.js';

/** The status and message of what `run` threw (it must throw an OperatorError). */
async function refusal(run: () => Promise<unknown>): Promise<{ status: number; message: string }> {
  try {
    await run();
  } catch (err) {
    expect(err).toBeInstanceOf(OperatorError);
    expect((err as Error).name).toBe('OperatorError');
    return { status: (err as OperatorError).status, message: (err as Error).message };
  }
  throw new Error('expected a refusal');
}

describe('tenants', () => {
  it('a name is trimmed and stored; the tenant can be read back', async () => {
    const store = createMemoryStore();
    const t = await createTenant(store, '  Acme AG  ');
    expect(t.name).toBe('Acme AG');
    expect(t.id).toMatch(/^ten_/);
    expect(Number.isNaN(Date.parse(t.createdAt))).toBe(false);
    expect(await store.getTenant(t.id)).toEqual(t);
  });

  it('an empty, blank or over-long name: 400, nothing stored', async () => {
    const store = createMemoryStore();
    for (const name of ['', '   ', 'x'.repeat(201)]) {
      expect(await refusal(() => createTenant(store, name))).toEqual({ status: 400, message: 'name must be 1-200 characters' });
    }
    expect((await createTenant(store, 'y'.repeat(200))).name).toHaveLength(200);
  });
});

describe('keys', () => {
  it('issued once in clear: only its hash and last four characters are stored, scope ai by default, active', async () => {
    const store = createMemoryStore();
    const t = await createTenant(store, 'Acme');
    const { key, record } = await issueKey(store, 'svc', { tenantId: t.id, name: '  ci  ' });
    expect(key.startsWith(keyPrefix('svc'))).toBe(true);
    expect(record).toMatchObject({ tenantId: t.id, hash: hashApiKey(key), last4: key.slice(-4), name: 'ci', scopes: ['ai'], allowedIps: null, status: 'active', revokedAt: null });
    expect(JSON.stringify(record)).not.toContain(key);
    expect(await store.getKeyByHash(hashApiKey(key))).toEqual(record);
    // Two keys are different keys.
    const second = await issueKey(store, 'svc', { tenantId: t.id });
    expect(second.key).not.toBe(key);
    expect(second.record.id).not.toBe(record.id);
    expect(second.record.name).toBe('');
  });

  it('scopes are de-duplicated; allowed addresses and ranges are kept as given', async () => {
    const store = createMemoryStore();
    const t = await createTenant(store, 'Acme');
    const { record } = await issueKey(store, 'svc', { tenantId: t.id, scopes: ['ai', 'ai', 'billing:read'], allowedIps: ['10.0.0.0/8', '2001:db8::1'] });
    expect(record.scopes).toEqual(['ai', 'billing:read']);
    expect(record.allowedIps).toEqual(['10.0.0.0/8', '2001:db8::1']);
    expect((await issueKey(store, 'svc', { tenantId: t.id, name: 'n'.repeat(300) })).record.name).toHaveLength(200);
  });

  it('refused: an unknown tenant (404), malformed scopes or addresses (400); nothing is stored', async () => {
    const store = createMemoryStore();
    const t = await createTenant(store, 'Acme');
    expect(await refusal(() => issueKey(store, 'svc', { tenantId: 'ten_nope' }))).toEqual({ status: 404, message: 'unknown tenant' });
    for (const scopes of [['has space'], [''], ['x'.repeat(65)], 'ai' as unknown as string[], [7 as unknown as string], ['ai', 'bad scope']]) {
      expect(await refusal(() => issueKey(store, 'svc', { tenantId: t.id, scopes }))).toEqual({ status: 400, message: 'scopes must be a list of scope names' });
    }
    for (const allowedIps of [[], ['not-an-ip'], ['10.0.0.0/33'], '10.0.0.1' as unknown as string[], ['10.0.0.1', 'not-an-ip'], [167772161 as unknown as string]]) {
      expect(await refusal(() => issueKey(store, 'svc', { tenantId: t.id, allowedIps }))).toEqual({
        status: 400,
        message: 'allowed_ips must be a non-empty list of addresses or CIDR ranges',
      });
    }
    expect(await store.listKeys(t.id)).toEqual([]);
    // The longest accepted scope name.
    expect((await issueKey(store, 'svc', { tenantId: t.id, scopes: ['s'.repeat(64)] })).record.scopes).toEqual(['s'.repeat(64)]);
  });

  it('revoked: the stored key says so and when; an unknown key is 404', async () => {
    const store = createMemoryStore();
    const t = await createTenant(store, 'Acme');
    const { record } = await issueKey(store, 'svc', { tenantId: t.id });
    const revoked = await revokeKey(store, record.id);
    expect(revoked.status).toBe('revoked');
    expect(Number.isNaN(Date.parse(revoked.revokedAt ?? ''))).toBe(false);
    expect((await store.getKeyById(record.id))?.status).toBe('revoked');
    expect(await refusal(() => revokeKey(store, 'key_nope'))).toEqual({ status: 404, message: 'unknown key' });
  });

  it('the view shows the brand prefix and last four characters, never the hash', async () => {
    const store = createMemoryStore();
    const t = await createTenant(store, 'Acme');
    const { key, record } = await issueKey(store, 'acme', { tenantId: t.id, name: 'ci', allowedIps: ['10.1.2.3'] });
    const view = keyView(record, 'acme');
    expect(view).toEqual({
      id: record.id, tenant_id: t.id, name: 'ci', display: `${keyPrefix('acme')}…${key.slice(-4)}`,
      scopes: ['ai'], allowed_ips: ['10.1.2.3'], status: 'active', created_at: record.createdAt, revoked_at: null,
    });
    expect(JSON.stringify(view)).not.toContain(record.hash);
  });
});

describe('lifecycle (a stop drains)', () => {
  it('takes new work until drain(), then not', () => {
    const l = new Lifecycle();
    expect(l.draining).toBe(false);
    l.drain();
    expect(l.draining).toBe(true);
    l.drain();
    expect(l.draining).toBe(true);
  });

  it('counts admission checks in flight until each settles, fulfilled or rejected, and passes their outcome through', async () => {
    const l = new Lifecycle();
    let finishA!: (v: string) => void;
    let failB!: (e: Error) => void;
    const a = l.track(new Promise<string>((r) => (finishA = r)));
    const b = l.track(new Promise<string>((_, j) => (failB = j)));
    expect(l.checksInFlight).toBe(2);
    finishA('held');
    await expect(a).resolves.toBe('held');
    expect(l.checksInFlight).toBe(1);
    failB(new Error('store down'));
    await expect(b).rejects.toThrow('store down');
    expect(l.checksInFlight).toBe(0);
  });
});
