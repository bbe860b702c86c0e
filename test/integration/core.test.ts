import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { startGateway, UUID, type TestGateway } from '../harness/gateway.js';
import { call, expectEnvelope, expectNoLeak, post } from '../harness/http.js';
import { logsCaughtUp } from '../harness/logs.js';

let gw: TestGateway;
const INTERNAL = ['sim-quick-1', 'sim-core-1', 'sim-deep-r1', 'sim-embed-1'];
let secrets: string[];

beforeAll(async () => {
  gw = await startGateway();
  secrets = [...INTERNAL, gw.upstreamKey];
});
afterAll(async () => {
  await gw?.stop();
});

const chat = (model: string, extra: Record<string, unknown> = {}) => ({
  model,
  messages: [{ role: 'user', content: 'Say hello' }],
  ...extra,
});
const lastUpstream = async () => {
  const stats = await gw.sim('/_sim/stats');
  return stats.recent[stats.recent.length - 1];
};

describe('GET /v1/models', () => {
  it('lists the eight aliases with the svc fields, and a request id', async () => {
    const r = await call(`${gw.base}/models`, { key: gw.key });
    expect(r.status).toBe(200);
    expect(r.headers.get('x-request-id')).toMatch(UUID);
    expect(r.json.object).toBe('list');
    expect(r.json.data).toHaveLength(8);
    const floating = r.json.data.filter((m: any) => m.svc_floating);
    const pinned = r.json.data.filter((m: any) => !m.svc_floating);
    expect(floating.map((m: any) => m.id).sort()).toEqual(['svc-core', 'svc-deep', 'svc-embed', 'svc-quick']);
    for (const m of floating) {
      expect(m).toMatchObject({ object: 'model', owned_by: 'svc' });
      expect(m.svc_pinned_variant).toBe(`${m.id}-2026-08`);
      expect(['chat', 'embedding']).toContain(m.svc_kind);
      expect(m.svc_pinned_date).toBeUndefined();
    }
    for (const m of pinned) {
      expect(m.svc_pinned_date).toBe('2026-08');
      expect(m.svc_pinned_variant).toBeUndefined();
    }
    expect(r.json.data.find((m: any) => m.id === 'svc-embed').svc_kind).toBe('embedding');
    expectNoLeak(r, secrets);
  });

  it('retrieves one model and 404s an unknown one in the envelope', async () => {
    const one = await call(`${gw.base}/models/svc-deep-2026-08`, { key: gw.key });
    expect(one.status).toBe(200);
    expect(one.json).toMatchObject({ id: 'svc-deep-2026-08', object: 'model', svc_kind: 'chat', svc_floating: false });
    expectEnvelope(await call(`${gw.base}/models/sim-core-1`, { key: gw.key }), 404, null);
  });
});

describe('POST /v1/chat/completions (non-streaming)', () => {
  it('rewrites the alias up and back, id = svc.request_id = x-request-id, temperature 0.7 by default', async () => {
    const r = await post(`${gw.base}/chat/completions`, chat('svc-core'), gw.key);
    expect(r.status, r.text).toBe(200);
    const rid = r.headers.get('x-request-id');
    expect(rid).toMatch(UUID);
    expect(r.json).toMatchObject({ id: rid, object: 'chat.completion', model: 'svc-core', svc: { alias: 'svc-core', request_id: rid } });
    expect(r.json.choices[0].message.role).toBe('assistant');
    expect(typeof r.json.choices[0].message.content).toBe('string');
    const u = r.json.usage;
    expect(u.total_tokens).toBe(u.prompt_tokens + u.completion_tokens);
    expect(r.json.svc.max_tokens_floor_applied).toBeUndefined();
    expectNoLeak(r, secrets);

    const up = await lastUpstream();
    expect(up.path).toBe('/v1/chat/completions');
    expect(up.body.model).toBe('sim-core-1');
    expect(up.body.temperature).toBe(0.7);
  });

  it("a long conversation, written by hand, reaches the provider as the caller wrote it (its messages copied, not serialised again)", async () => {
    // Spaces, escapes and its own key order: above COPY_MIN_BYTES the messages go up as these bytes.
    const turns = Array.from({ length: 10 }, (_, i) => `{ "role" : "${i % 2 ? 'assistant' : 'user'}", "content" : "Gr\\u00fcezi \\"${i}\\" ${'z'.repeat(90)}" }`);
    const text = `{"messages" : [ ${turns.join(' ,\n ')} ], "model": "svc-core", "user": "u-long"}`;
    const r = await fetch(`${gw.base}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': gw.key }, body: text });
    expect(r.status).toBe(200);
    expect((await r.json()).model).toBe('svc-core');
    const up = await lastUpstream();
    expect(up.body).toMatchObject({ model: 'sim-core-1', user: 'u-long', temperature: 0.7, messages: JSON.parse(text).messages });
    expect(up.body.messages[0].content).toBe(`Grüezi "0" ${'z'.repeat(90)}`);
  });

  it('max_tokens caps the visible answer: finish_reason length, index 0', async () => {
    const r = await post(`${gw.base}/chat/completions`, chat('svc-core', { max_tokens: 3, messages: [{ role: 'user', content: 'long #sim:tokens=20' }] }), gw.key);
    expect(r.status).toBe(200);
    expect(r.json.choices[0]).toMatchObject({ index: 0, finish_reason: 'length' });
    expect(r.json.usage.completion_tokens).toBe(3);
    const stop = await post(`${gw.base}/chat/completions`, chat('svc-core', { messages: [{ role: 'user', content: 'short #sim:tokens=2' }] }), gw.key);
    expect(stop.json.choices[0]).toMatchObject({ index: 0, finish_reason: 'stop' });
  });

  it('keeps a caller temperature and accepts pinned aliases', async () => {
    const r = await post(`${gw.base}/chat/completions`, chat('svc-quick-2026-08', { temperature: 0.1 }), gw.key);
    expect(r.status).toBe(200);
    expect(r.json.model).toBe('svc-quick-2026-08');
    expect(r.json.svc.alias).toBe('svc-quick-2026-08');
    expect((await lastUpstream()).body.temperature).toBe(0.1);
  });

  it('passes tools and tool_choice through; tool calls come back in the usual format', async () => {
    const tools = [
      {
        type: 'function',
        function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
      },
    ];
    const r = await post(`${gw.base}/chat/completions`, chat('svc-core', { tools, tool_choice: 'required' }), gw.key);
    expect(r.status, r.text).toBe(200);
    const msg = r.json.choices[0].message;
    expect(r.json.choices[0].finish_reason).toBe('tool_calls');
    expect(msg.tool_calls[0]).toMatchObject({ type: 'function', function: { name: 'get_weather' } });
    expect(JSON.parse(msg.tool_calls[0].function.arguments)).toHaveProperty('city');
    const up = await lastUpstream();
    expect(up.body.tools).toEqual(tools);
    expect(up.body.tool_choice).toBe('required');
  });

  it('sends the provider key upstream, never the client key', async () => {
    await post(`${gw.base}/chat/completions`, chat('svc-core'), gw.key, { authorization: 'Bearer garbage-from-client', cookie: 'a=b' });
    const up = await lastUpstream();
    expect(up.headers.authorization).toBe(`Bearer ${gw.upstreamKey}`);
    expect(up.headers['x-api-key']).toBeUndefined();
    expect(up.headers.cookie).toBeUndefined();
    expect(JSON.stringify(up.headers)).not.toContain(gw.key);
    expect(up.headers['x-svc-tenant-id']).toBeUndefined();
  });
});

describe('POST /v1/embeddings', () => {
  it('embeds a string: 3584 numbers, svc with request_count 1', async () => {
    const r = await post(`${gw.base}/embeddings`, { model: 'svc-embed', input: 'hello' }, gw.key);
    expect(r.status, r.text).toBe(200);
    const rid = r.headers.get('x-request-id');
    expect(r.json).toMatchObject({ object: 'list', model: 'svc-embed', svc: { alias: 'svc-embed', request_id: rid, request_count: 1 } });
    expect(r.json.data).toHaveLength(1);
    expect(r.json.data[0].object).toBe('embedding');
    expect(r.json.data[0].embedding).toHaveLength(3584);
    expect(typeof r.json.data[0].embedding[0]).toBe('number');
    expectNoLeak(r, secrets);
    expect((await lastUpstream()).body.model).toBe('sim-embed-1');
  });

  it('a full batch (maxEmbeddingInputs inputs, a response of ~12 MB) comes back whole', async () => {
    const n = gw.config.limits.maxEmbeddingInputs;
    const r = await post(`${gw.base}/embeddings`, { model: 'svc-embed', input: Array.from({ length: n }, (_, i) => `text ${i}`) }, gw.key);
    expect(r.status, r.text.slice(0, 200)).toBe(200);
    expect(r.json.data).toHaveLength(n);
    expect(r.json.data[n - 1].embedding).toHaveLength(3584);
    expect(r.json.svc.request_count).toBe(n);
    const over = await post(`${gw.base}/embeddings`, { model: 'svc-embed', input: Array.from({ length: n + 1 }, () => 'x') }, gw.key);
    expectEnvelope(over, 400, 'invalid_request');
    expect(over.json.error.param).toBe('input');
  });

  it("passes the provider's vectors through unchanged (copied from its answer, not written again)", async () => {
    const input = ['copied vector one', 'copied vector two'];
    const r = await post(`${gw.base}/embeddings`, { model: 'svc-embed', input }, gw.key);
    expect(r.status).toBe(200);
    const direct = await gw.sim('/v1/embeddings', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${gw.upstreamKey}` },
      body: JSON.stringify({ model: 'sim-embed-1', input }),
    });
    expect(r.json.data.map((d: any) => d.embedding)).toEqual(direct.data.map((d: any) => d.embedding));
    expect(r.json.data.map((d: any) => d.index)).toEqual([0, 1]);
  });

  it('embeds an array: one item and one request per input string', async () => {
    const r = await post(`${gw.base}/embeddings`, { model: 'svc-embed-2026-08', input: ['a', 'b', 'c'] }, gw.key);
    expect(r.status).toBe(200);
    expect(r.json.data.map((d: any) => d.index)).toEqual([0, 1, 2]);
    expect(r.json.svc.request_count).toBe(3);
  });
});

describe('refusals', () => {
  it('an embedding alias on chat and a chat alias on embeddings are 400', async () => {
    const a = await post(`${gw.base}/chat/completions`, chat('svc-embed'), gw.key);
    expectEnvelope(a, 400, 'SRV_001', 'invalid_request_error');
    expect(a.json.error.message).toContain('/embeddings');
    const b = await post(`${gw.base}/embeddings`, { model: 'svc-quick', input: 'x' }, gw.key);
    expectEnvelope(b, 400, 'SRV_001', 'invalid_request_error');
  });

  it('an unknown alias is 400 and the message lists the valid values', async () => {
    const r = await post(`${gw.base}/chat/completions`, chat('gpt-4o'), gw.key);
    expectEnvelope(r, 400, 'SRV_001', 'invalid_request_error');
    expect(r.json.error.param).toBeNull();
    for (const a of ['svc-quick', 'svc-core', 'svc-deep', 'svc-quick-2026-08', 'svc-core-2026-08', 'svc-deep-2026-08']) {
      expect(r.json.error.message).toContain(a);
    }
    expect(r.json.error.message).not.toContain('gpt-4o');
    const e = await post(`${gw.base}/embeddings`, { model: 'nope', input: 'x' }, gw.key);
    expect(e.json.error.message).toContain('svc-embed-2026-08');
  });

  it('an internal model name is refused like an unknown alias, without confirming it', async () => {
    const r = await post(`${gw.base}/chat/completions`, chat('sim-core-1'), gw.key);
    expectEnvelope(r, 400, 'SRV_001');
    expectNoLeak(r, secrets);
    const e = await post(`${gw.base}/embeddings`, { model: 'sim-embed-1', input: 'x' }, gw.key);
    expectEnvelope(e, 400, 'SRV_001');
    expectNoLeak(e, secrets);
  });

  it('empty input is 400 (empty string, empty array, missing)', async () => {
    for (const input of ['', [], undefined, ['ok', '']]) {
      const r = await post(`${gw.base}/embeddings`, { model: 'svc-embed', input }, gw.key);
      expectEnvelope(r, 400, 'SRV_001', 'invalid_request_error');
      expect(r.json.error.message).toMatch(/non-empty/);
    }
  });

  it('a body failing validation is 400 invalid_request naming the field, never echoing the value', async () => {
    const marker = 'ECHO-MARKER-7731';
    const cases: Array<[unknown, string]> = [
      [{ model: 'svc-core', messages: marker }, 'messages'],
      [{ model: 'svc-core', messages: [{ role: marker, content: 'x' }] }, 'messages[0].role'],
      [{ model: 'svc-core', messages: [{ role: 'user', content: 'x' }], max_tokens: marker }, 'max_tokens'],
      [{ model: 'svc-core', messages: [{ role: 'user', content: 'x' }], temperature: marker }, 'temperature'],
      [{ model: 'svc-core', messages: [{ role: 'user', content: 'x' }], stream: marker }, 'stream'],
      [{ messages: [{ role: 'user', content: 'x' }] }, 'model'],
      [{ model: 12345, messages: [] }, 'model'],
    ];
    for (const [body, param] of cases) {
      const r = await post(`${gw.base}/chat/completions`, body, gw.key);
      expectEnvelope(r, 400, 'invalid_request', 'invalid_request_error');
      expect(r.json.error.param).toBe(param);
      expect(r.text).not.toContain(marker);
    }
    const bad = await post(`${gw.base}/chat/completions`, `{"model": "svc-core", ${marker}`, gw.key);
    expectEnvelope(bad, 400, 'invalid_request');
    expect(bad.text).not.toContain(marker);
    const none = await call(`${gw.base}/chat/completions`, { method: 'POST', key: gw.key });
    expectEnvelope(none, 400, 'invalid_request');
  });

  it('refused requests never reach the provider', async () => {
    const before = (await gw.sim('/_sim/stats')).totalRequests;
    await post(`${gw.base}/chat/completions`, chat('svc-embed'), gw.key);
    await post(`${gw.base}/chat/completions`, chat('svc-core'), 'svc_pk_' + 'x'.repeat(43));
    await post(`${gw.base}/embeddings`, { model: 'svc-embed', input: [] }, gw.key);
    expect((await gw.sim('/_sim/stats')).totalRequests).toBe(before);
  });
});

describe('keys', () => {
  it('missing, unknown, malformed and revoked keys get the same 401', async () => {
    const created = await gw.admin.createKey(gw.tenantId, { scopes: ['ai'] });
    expect(created.key).toMatch(/^svc_pk_[A-Za-z0-9_-]{43}$/);
    const ok = await call(`${gw.base}/models`, { key: created.key });
    expect(ok.status).toBe(200);
    await gw.admin.revokeKey(created.id);
    const replies = [
      await call(`${gw.base}/models`),
      await call(`${gw.base}/models`, { key: 'svc_pk_' + 'A'.repeat(43) }),
      await call(`${gw.base}/models`, { key: 'not-a-key' }),
      await call(`${gw.base}/models`, { key: created.key }),
      await post(`${gw.base}/chat/completions`, chat('svc-core'), created.key),
    ];
    const messages = new Set<string>();
    for (const r of replies) {
      expectEnvelope(r, 401, 'invalid_api_key', 'invalid_request_error');
      messages.add(r.json.error.message);
      expect(r.text).not.toContain(created.key);
    }
    expect(messages.size).toBe(1);
  });

  it('keys are listed without their secret', async () => {
    const { data } = await gw.admin.listKeys(gw.tenantId);
    expect(data.length).toBeGreaterThan(0);
    expect(JSON.stringify(data)).not.toContain(gw.key);
    expect(data[0]).not.toHaveProperty('hash');
  });
});

describe('request ids and Envoy replies', () => {
  it('replaces a client-sent x-request-id', async () => {
    const r = await call(`${gw.base}/models`, { key: gw.key, headers: { 'x-request-id': 'client-chosen-id' } });
    expect(r.status).toBe(200);
    expect(r.headers.get('x-request-id')).toMatch(UUID);
  });

  it('a route miss is a 404 envelope', async () => {
    expectEnvelope(await call(`${gw.base}/does-not-exist`, { key: gw.key }), 404, null);
    expectEnvelope(await call(`${gw.base}/does-not-exist`), 404, null);
  });

  it('an over-size body is a 413 envelope, on every path', async () => {
    const big = 'x'.repeat(gw.config.limits.maxRequestBytes + 1024);
    const r = await post(`${gw.base}/chat/completions`, chat('svc-core', { messages: [{ role: 'user', content: big }] }), gw.key);
    expectEnvelope(r, 413, 'request_too_large');
    // The account paths answer in the account service's shape: status-class code, token in the message.
    const acct = await post(`${gw.base}/accounts/me`, { pad: big }, gw.key);
    expectEnvelope(acct, 413, 'VAL_001');
    expect(acct.json.error.message).toContain("'error': 'request_too_large'");
    const huge = 'x'.repeat(gw.config.limits.maxResponseBytes + 1024); // beyond what Envoy buffers at all
    expectEnvelope(await post(`${gw.base}/embeddings`, { model: 'svc-embed', input: huge }, gw.key), 413, 'request_too_large');
  });

  it('normalises paths before routing and auth', async () => {
    const r = await call(`${gw.base.replace('/v1', '')}//v1//models`, { key: gw.key });
    expect(r.status).toBe(200);
    const dots = await call(`${gw.base}/../v1/models`, { key: gw.key });
    expect(dots.status).toBe(200);
    const noKey = await call(`${gw.base}/./models`);
    expectEnvelope(noKey, 401, 'invalid_api_key');
  });

  it('drops headers with underscores: never read as credentials, never forwarded', async () => {
    const r = await call(`${gw.base}/models`, { headers: { x_api_key: gw.key } });
    expectEnvelope(r, 401, 'invalid_api_key');
    const ok = await call(`${gw.base}/models`, { key: gw.key, headers: { x_svc_tenant_id: 'ten_other' } });
    expect(ok.status).toBe(200);
  });
});

describe('log lines', () => {
  it('carry the request id, and never an internal model name, a key or prompt text', async () => {
    const marker = 'PROMPT-TEXT-MARKER-5521';
    // With the memory store the account service runs inside the sidecar's process.
    const names = gw.stack.processes.filter((p) => ['sidecar', 'envoy', 'account'].includes(p.name)).map((p) => p.name);
    await logsCaughtUp(gw); // earlier tests' lines are written asynchronously too
    const before = names.map((n) => gw.stack.process(n).lines.length);
    const r = await post(`${gw.base}/chat/completions`, chat('svc-deep', { messages: [{ role: 'user', content: marker }] }), gw.key);
    expect(r.status).toBe(200);
    await post(`${gw.base}/chat/completions`, chat('sim-core-1'), gw.key); // refused: internal name in the request
    await post(`${gw.base}/embeddings`, { model: 'svc-embed', input: marker }, gw.key);
    await logsCaughtUp(gw); // logs are written asynchronously
    // Only this test's lines (earlier tests put internal names in URLs themselves, which the access log records).
    const logs = names.map((n, i) => gw.stack.process(n).lines.slice(before[i]).join('\n')).join('\n');
    expect(logs).toContain(r.headers.get('x-request-id'));
    for (const secret of [...INTERNAL, marker, gw.key, gw.upstreamKey]) {
      const hit = logs.split('\n').find((l) => l.includes(secret));
      expect(hit, hit).toBeUndefined();
    }
  });
});

describe('sidecar side streams', () => {
  const resets = async (): Promise<number> => {
    const { host, port } = gw.config.listen.envoyAdmin;
    const text = await (await fetch(`http://${host}:${port}/stats?filter=^cluster\\.sidecar\\.upstream_rq_tx_reset$`)).text();
    const m = /upstream_rq_tx_reset: (\d+)/.exec(text);
    if (!m) throw new Error(`no reset counter in Envoy's stats: ${text.slice(0, 200)}`);
    return Number(m[1]);
  };

  it('end cleanly: completed requests (buffered and streamed) cost the sidecar no RST_STREAM', async () => {
    const before = await resets();
    for (let i = 0; i < 10; i++) {
      const r = await post(`${gw.base}/chat/completions`, chat('svc-core', i % 2 ? { stream: true } : {}), gw.key);
      expect(r.status).toBe(200);
    }
    await post(`${gw.base}/embeddings`, { model: 'svc-embed', input: 'x' }, gw.key);
    expect(await resets()).toBe(before);
  });
});
