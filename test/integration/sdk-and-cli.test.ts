import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { cliJson } from '../harness/cli.js';
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
});
