import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { cliJson, cliText } from '../harness/cli.js';
import { startGateway, UUID, type TestGateway } from '../harness/gateway.js';
import { dumpRedis } from '../harness/redis.js';
import { call } from '../harness/http.js';

let gw: TestGateway;

beforeAll(async () => {
  gw = await startGateway({ store: 'redis' });
});
afterAll(async () => {
  await gw?.stop();
});

describe('the official openai npm client, configured with base URL and X-API-Key', () => {
  const client = () =>
    new OpenAI({ baseURL: gw.base, apiKey: 'unused-by-the-gateway', defaultHeaders: { 'X-API-Key': gw.key }, maxRetries: 0 });

  it('lists models', async () => {
    const page = await client().models.list();
    const ids = page.data.map((m) => m.id);
    expect(ids).toHaveLength(8);
    expect(ids).toContain('svc-core-2026-08');
  });

  it('creates a chat completion', async () => {
    const res = await client().chat.completions.create({ model: 'svc-quick', messages: [{ role: 'user', content: 'Hi' }] });
    expect(res.model).toBe('svc-quick');
    expect(res.id).toMatch(UUID);
    expect(res.choices[0]?.message.content).toBeTruthy();
    expect((res as unknown as { svc: { request_id: string } }).svc.request_id).toBe(res.id);
    expect(res.usage?.total_tokens).toBeGreaterThan(0);
  });

  it('creates embeddings (the client asks for base64 and decodes it)', async () => {
    const res = await client().embeddings.create({ model: 'svc-embed', input: ['one', 'two'] });
    expect(res.model).toBe('svc-embed');
    expect(res.data).toHaveLength(2);
    expect(res.data[0]?.embedding).toHaveLength(3584);
  });

  it('surfaces gateway errors as APIError with the envelope', async () => {
    const err = await client()
      .chat.completions.create({ model: 'not-a-model', messages: [{ role: 'user', content: 'Hi' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    const e = err as InstanceType<typeof OpenAI.APIError>;
    expect(e.status).toBe(400);
    expect(e.code).toBe('SRV_001');
  });
});

describe('operator CLI against the running stack', () => {
  const cli = (...args: string[]) => cliJson(gw, ...args);

  it('creates a tenant and a key (printed once), lists and revokes it', async () => {
    const tenant = await cli('tenant', 'create', '--name', 'cli tenant');
    expect(tenant.id).toMatch(/^ten_/);
    const key = await cli('key', 'create', '--tenant', tenant.id, '--name', 'ci');
    expect(key.key).toMatch(/^svc_pk_/);
    expect((await call(`${gw.base}/models`, { key: key.key })).status).toBe(200);

    const listed = await cli('key', 'list', '--tenant', tenant.id);
    expect(listed).toHaveLength(1);
    expect(JSON.stringify(listed)).not.toContain(key.key);
    expect(listed[0]).toMatchObject({ id: key.id, status: 'active' });

    const revoked = await cli('key', 'revoke', key.id);
    expect(revoked.status).toBe('revoked');
    expect((await call(`${gw.base}/models`, { key: key.key })).status).toBe(401);
  });

  it('refuses without the admin token', async () => {
    const res = await fetch(`${gw.stack.adminUrl}/admin/tenants`);
    expect(res.status).toBe(401);
  });

  it('the key is stored only as its SHA-256 hash in Redis (every key and value of every type)', async () => {
    const { createHash } = await import('node:crypto');
    const dump = await dumpRedis(gw.redis!.url);
    expect(dump).not.toContain(gw.key);
    expect(dump).toContain(createHash('sha256').update(gw.key).digest('hex'));
  });

  it('key list shows each key\'s name and allowed addresses', async () => {
    const tenant = await cli('tenant', 'create', '--name', 'list tenant');
    await cli('key', 'create', '--tenant', tenant.id, '--name', 'office', '--allowed-ips', '203.0.113.7,2001:db8::/32');
    await cli('key', 'create', '--tenant', tenant.id, '--name', 'laptop');
    const { code, stdout } = await cliText(gw, ['key', 'list', '--tenant', tenant.id]);
    expect(code).toBe(0);
    const lines = stdout.trim().split('\n');
    expect(lines[0]).toBe('id\tstatus\tkey\tname\tscopes\tallowed addresses');
    expect(lines.find((l) => l.includes('\toffice\t'))).toMatch(/\tai\t203\.0\.113\.7 2001:db8::\/32$/);
    expect(lines.find((l) => l.includes('\tlaptop\t'))).toMatch(/\tai\tany address$/);
  });

  it('refuses unknown flags, stray arguments (a pasted "[--allowed-ips …]") and unknown scopes, creating nothing', async () => {
    const tenant = await cli('tenant', 'create', '--name', 'strict tenant');
    for (const args of [
      ['key', 'create', '--tenant', tenant.id, '[--allowed-ips', '203.0.113.7]'],
      ['key', 'create', '--tenant', tenant.id, '--allowed_ips', '203.0.113.7'],
      ['key', 'create', '--tenant', tenant.id, '--scopes', 'admin'],
      ['key', 'create', '--tenant', tenant.id, '--scopes', 'ai,full'],
      ['key', 'create', '--tenant', tenant.id, '--amount', '5'],
    ]) {
      const r = await cliText(gw, args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(/unexpected argument|Unknown option|unknown scope|takes no --amount/);
    }
    expect(await cli('key', 'list', '--tenant', tenant.id)).toHaveLength(0);
  });

  it('a repeated grant with the same key says "already applied" and changes nothing; amounts carry the currency', async () => {
    const tenant = await cli('tenant', 'create', '--name', 'grant tenant');
    const first = await cliText(gw, ['credits', 'grant', '--tenant', tenant.id, '--amount', '25', '--key', 'topup-1']);
    expect(first.stdout).toMatch(/^grant 25\.000000 CHF; balance 25\.000000 CHF/);
    const again = await cliText(gw, ['credits', 'grant', '--tenant', tenant.id, '--amount', '25', '--key', 'topup-1']);
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/^already applied \(key topup-1\): grant 25\.000000 CHF .*nothing changed/);
    const account = await cliText(gw, ['account', '--tenant', tenant.id]);
    expect(account.stdout).toMatch(/^balance 25\.000000 CHF, held 0\.000000 CHF, spent in \d{4}-\d{2} 0\.000000 CHF, cap none/);
    expect((await cliText(gw, ['cap', 'set', '--tenant', tenant.id, '--amount', '10'])).stdout).toMatch(/^spend cap 10\.000000 CHF per calendar month/);
    expect((await cliText(gw, ['ledger', '--tenant', tenant.id])).stdout.split('\n')[0]).toContain('amount CHF');
  });

  it('shows one customer\'s usage, one record per request', async () => {
    const body = JSON.stringify({ model: 'svc-quick', messages: [{ role: 'user', content: 'Hi' }] });
    expect((await call(`${gw.base}/chat/completions`, { method: 'POST', key: gw.key, body })).status).toBe(200);
    // The settlement is written after the response: wait for its record.
    for (let i = 0; i < 100 && (await cli('usage', '--tenant', gw.tenantId)).length === 0; i++) await new Promise((r) => setTimeout(r, 50));
    const text = await cliText(gw, ['usage', '--tenant', gw.tenantId]);
    expect(text.stdout).toMatch(/\tsvc-quick\t\d+\t\d+\t1\t\d+\.\d{6}/);
  });

  it('names the URL it could not reach and how to point elsewhere', async () => {
    const r = await cliText(gw, ['tenant', 'list'], { ADMIN_URL: 'http://127.0.0.1:9' });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('could not reach the operator API at http://127.0.0.1:9');
    expect(r.stderr).toContain('ADMIN_URL=');
  });
});
