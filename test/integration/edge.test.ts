import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, UUID, type TestGateway } from '../harness/gateway.js';
import { call, expectEnvelope, post } from '../harness/http.js';
import { logsCaughtUp } from '../harness/logs.js';
import { holdFor } from '../harness/money.js';
import { readSse } from '../harness/sse.js';

/**
 * Edge limits, what reaches the provider, and truthful errors (issue 9,
 * items 3 to 13), through real Envoy.
 */
let gw: TestGateway;

beforeAll(async () => {
  gw = await startGateway();
});
afterAll(async () => {
  await gw?.stop();
});

const chatBody = (extra: Record<string, unknown> = {}) => ({ model: 'svc-core', max_tokens: 20, messages: [{ role: 'user', content: 'hello' }], ...extra });
const gatewayPort = () => Number(new URL(gw.base).port);
const lastProviderRequest = async () => (await gw.sim('/_sim/stats')).recent.at(-1) as { path: string; headers: Record<string, string>; body: unknown };
const providerCount = async () => (await gw.sim('/_sim/stats')).totalRequests as number;

/** Writes raw bytes on a fresh connection; resolves with everything read until the server closes or `settleMs` of silence after data. */
function rawExchange(head: string, opts: { body?: Buffer; settleMs?: number; timeoutMs?: number } = {}): Promise<string> {
  return new Promise((resolve) => {
    let out = '';
    let idle: NodeJS.Timeout | undefined;
    const s = connect(gatewayPort(), '127.0.0.1', () => {
      s.write(head);
      if (opts.body) s.write(opts.body);
    });
    const done = () => {
      clearTimeout(idle);
      clearTimeout(limit);
      s.destroy();
      resolve(out);
    };
    const limit = setTimeout(done, opts.timeoutMs ?? 10_000);
    s.on('data', (d) => {
      out += d.toString('latin1');
      clearTimeout(idle);
      idle = setTimeout(done, opts.settleMs ?? 300);
    });
    s.on('close', done);
    s.on('error', done);
  });
}

function parseRaw(text: string): { status: number; headers: Map<string, string>; body: string } {
  const [head = '', ...rest] = text.split('\r\n\r\n');
  const [statusLine = '', ...lines] = head.split('\r\n');
  const headers = new Map(lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()] as [string, string]));
  return { status: Number(statusLine.split(' ')[1]), headers, body: rest.join('\r\n\r\n') };
}

describe('3. a caller without a valid key is refused before its body is buffered', () => {
  const BIG = 31 * 1024 * 1024;
  const start = (key: string | null) =>
    `POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: ${BIG}\r\n${key ? `X-API-Key: ${key}\r\n` : ''}\r\n`;

  it.each([
    ['no key', null],
    ['an unknown key', `svc_pk_${'A'.repeat(43)}`],
  ])('%s: the 401 comes while the 31 MB upload has barely started', async (_name, key) => {
    // Only the first 64 KiB of the body is ever sent: an answer proves nothing waited for the rest.
    const got = parseRaw(await rawExchange(start(key), { body: Buffer.alloc(64 * 1024, 0x20), timeoutMs: 8000 }));
    expect(got.status).toBe(401);
    const env = JSON.parse(got.body);
    expect(env.error.code).toBe('invalid_api_key');
    expect(env.error.request_id).toMatch(UUID);
  });

  it('a revoked key too', async () => {
    const k = await gw.admin.createKey(gw.tenantId, { name: 'to revoke', scopes: ['ai'] });
    await gw.admin.revokeKey(k.id);
    const got = parseRaw(await rawExchange(start(k.key), { body: Buffer.alloc(64 * 1024, 0x20), timeoutMs: 8000 }));
    expect(got.status).toBe(401);
  });

  it('a valid key still gets its body read: a 1.5 MB chat body is served, a 3 MB one is a 413 envelope', async () => {
    const pad = 'x'.repeat(1_500_000);
    const ok = await post(`${gw.base}/chat/completions`, chatBody({ messages: [{ role: 'user', content: pad }] }), gw.key);
    expect(ok.status, ok.text.slice(0, 200)).toBe(200);
    const big = await post(`${gw.base}/chat/completions`, chatBody({ messages: [{ role: 'user', content: 'x'.repeat(3_000_000) }] }), gw.key);
    expectEnvelope(big, 413, 'request_too_large');
  });
});

describe('3. the key check before the body runs only where a body could be larger than the connection buffer', () => {
  /** ext_authz calls Envoy made so far (both filters, the key check and the full check, count here). */
  const authzCalls = async () => {
    const text = await (await fetch(`${gw.stack.envoyAdminUrl}/stats?filter=^http\\.gateway\\.ext_authz\\.(ok|denied)$`)).text();
    return [...text.matchAll(/: (\d+)/g)].reduce((n, m) => n + Number(m[1]), 0);
  };
  const counted = async (run: () => Promise<number>) => {
    const before = await authzCalls();
    const status = await run();
    return { status, calls: (await authzCalls()) - before };
  };
  const small = JSON.stringify(chatBody());
  const chunkedHead = (key: string) =>
    `POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-API-Key: ${key}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n`;

  it('a small chat, embeddings or account request with a content-length: one ext_authz call', async () => {
    expect(await counted(async () => (await post(`${gw.base}/chat/completions`, chatBody(), gw.key)).status)).toEqual({ status: 200, calls: 1 });
    expect(await counted(async () => (await post(`${gw.base}/chat/completions`, chatBody({ stream: true }), gw.key)).status)).toEqual({ status: 200, calls: 1 });
    expect(await counted(async () => (await post(`${gw.base}/embeddings`, { model: 'svc-embed', input: 'x' }, gw.key)).status)).toEqual({ status: 200, calls: 1 });
    const limit = gw.config.limits.connectionBufferBytes;
    const atLimit = JSON.stringify(chatBody({ messages: [{ role: 'user', content: 'x'.repeat(limit - small.length + 'hello'.length) }] }));
    expect(Buffer.byteLength(atLimit)).toBe(limit);
    // The account service's answer does not matter here (billing is off: a 404 envelope), only the calls.
    expect((await counted(async () => (await call(`${gw.base}/credits/topup`, { method: 'POST', key: gw.key, body: '{}' })).status)).calls).toBe(1);
    expect((await counted(async () => (await call(`${gw.base}/accounts/me`, { method: 'PUT', key: gw.key, body: '{}' })).status)).calls).toBe(1);
    expect(await counted(async () => (await call(`${gw.base}/chat/completions`, { method: 'POST', key: gw.key, body: atLimit })).status)).toEqual({ status: 200, calls: 1 });
  });

  it('a GET or HEAD on the account paths (no content-length): one header-only ext_authz call, and a bad key still gets the one 401', async () => {
    for (const method of ['GET', 'HEAD']) {
      expect((await counted(async () => (await call(`${gw.base}/accounts/me`, { method, key: gw.key })).status)).calls, method).toBe(1);
      expect((await counted(async () => (await call(`${gw.base}/credits`, { method, key: gw.key })).status)).calls, method).toBe(1);
    }
    const refused = await call(`${gw.base}/accounts/me`, { method: 'GET', key: `svc_pk_${'A'.repeat(43)}` });
    expectEnvelope(refused, 401, 'AUTH_001', 'authentication_error');
  });

  it('a bad key on a small body is still refused by the one check, with the same 401 envelope', async () => {
    const sent = await providerCount();
    const got = await counted(async () => {
      const r = await post(`${gw.base}/chat/completions`, chatBody(), `svc_pk_${'A'.repeat(43)}`);
      expectEnvelope(r, 401, 'invalid_api_key');
      return r.status;
    });
    expect(got).toEqual({ status: 401, calls: 1 });
    expect(await providerCount()).toBe(sent);
  });

  it('a body above the connection buffer, or one without a content-length (chunked): the key check first, two calls', async () => {
    const limit = gw.config.limits.connectionBufferBytes;
    const above = chatBody({ messages: [{ role: 'user', content: 'x'.repeat(limit) }] });
    expect(await counted(async () => (await post(`${gw.base}/chat/completions`, above, gw.key)).status)).toEqual({ status: 200, calls: 2 });
    const chunked = `${small.length.toString(16)}\r\n${small}\r\n0\r\n\r\n`;
    expect(await counted(async () => parseRaw(await rawExchange(`${chunkedHead(gw.key)}${chunked}`)).status)).toEqual({ status: 200, calls: 2 });
    expect((await counted(async () => (await call(`${gw.base}/credits/topup`, { method: 'POST', key: gw.key, body: 'x'.repeat(limit + 1) })).status)).calls).toBe(2);
  });

  it('a content-length that lies cannot carry a large body past the skipped key check: HTTP/2 resets the stream at once', async () => {
    const { connect: h2connect } = await import('node:http2');
    const session = h2connect(`http://127.0.0.1:${gatewayPort()}`);
    const sent = await providerCount();
    try {
      const outcome = await new Promise<string>((resolve) => {
        const req = session.request({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json', 'content-length': '100' });
        req.on('response', (h) => resolve(`answered ${String(h[':status'])}`));
        req.on('error', () => resolve(`reset ${req.rstCode}`));
        const chunk = Buffer.alloc(64 * 1024, 0x20);
        let written = 0;
        const pump = () => {
          while (written < 4 * 1024 * 1024 && !req.destroyed) {
            written += chunk.length;
            if (!req.write(chunk)) return void req.once('drain', pump);
          }
          req.end();
        };
        pump();
      });
      expect(outcome).toBe('reset 1'); // PROTOCOL_ERROR: more DATA than the declared length
    } finally {
      session.close();
    }
    expect(await providerCount()).toBe(sent);
  });
});

describe('5. deeply nested JSON', () => {
  it('10,000 levels in 20 KB: a 400 naming the body, not a 503', async () => {
    const deep = `{"model":"svc-core","messages":[{"role":"user","content":"hi","x":${'['.repeat(10_000)}${']'.repeat(10_000)}}]}`;
    expect(deep.length).toBeLessThan(21_000);
    for (const path of ['/chat/completions', '/embeddings']) {
      const r = await call(`${gw.base}${path}`, { method: 'POST', key: gw.key, body: deep });
      expectEnvelope(r, 400, 'invalid_request');
      expect(r.json.error.param).toBe('body');
    }
  });

  it('ordinary nesting (tools with a JSON schema) is served', async () => {
    const schema = { type: 'object', properties: { a: { type: 'object', properties: { b: { type: 'array', items: { type: 'string' } } } } } };
    const r = await post(`${gw.base}/chat/completions`, chatBody({ tools: [{ type: 'function', function: { name: 'f', parameters: schema } }] }), gw.key);
    expect(r.status, r.text.slice(0, 200)).toBe(200);
  });
});

describe('6. many request headers', () => {
  const headers = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`x-client-${i}`, 'v']));

  it('more than limits.maxRequestHeaders: a 431 envelope with a request id, and no credit held', async () => {
    const before = await gw.admin.account(gw.tenantId);
    const sent = await providerCount();
    for (const n of [92, 96, 110]) {
      const r = await post(`${gw.base}/chat/completions`, chatBody(), gw.key, headers(n));
      expectEnvelope(r, 431, 'request_headers_too_large');
    }
    expect((await gw.admin.account(gw.tenantId)).held).toBe(before.held);
    expect(await providerCount()).toBe(sent);
  });

  it('header bytes: above 60 KiB a 431 envelope; just below it, served with the gateway headers on top', async () => {
    const big = (kib: number) => ({ 'x-big': 'v'.repeat(kib * 1024) });
    expectEnvelope(await post(`${gw.base}/chat/completions`, chatBody(), gw.key, big(61)), 431, 'request_headers_too_large');
    const chat = await post(`${gw.base}/chat/completions`, chatBody(), gw.key, big(59));
    expect(chat.status, chat.text.slice(0, 200)).toBe(200);
    // The account service is a Node server: 16 KiB of headers at most, its own limit.
    const account = await call(`${gw.base}/accounts/me`, { key: gw.key, headers: big(15) });
    expect(account.status, account.text.slice(0, 200)).toBe(200);
  });

  it('up to the limit, the gateway adds its own headers without pushing the request over any limit', async () => {
    // fetch adds ~9 headers of its own (host, accept, user-agent, content-type, x-api-key …).
    for (const path of ['/chat/completions', '/accounts/me']) {
      const r = path === '/chat/completions' ? await post(`${gw.base}${path}`, chatBody(), gw.key, headers(88)) : await call(`${gw.base}${path}`, { key: gw.key, headers: headers(88) });
      expect(r.status, `${path}: ${r.text.slice(0, 200)}`).toBe(200);
    }
  });
});

describe('7. odd paths and header names', () => {
  const get = (path: string) => rawExchange(`GET ${path} HTTP/1.1\r\nHost: gw\r\nX-API-Key: ${gw.key}\r\nConnection: close\r\n\r\n`);

  it('escaped slashes and backslashes are decoded before routing and auth: the usual answers', async () => {
    const models = parseRaw(await get('/v1%2Fmodels'));
    expect(models.status).toBe(200);
    const back = parseRaw(await get('/v1/models%5C'));
    expect(back.status).toBe(404);
    expect(JSON.parse(back.body).error.request_id).toBe(back.headers.get('x-request-id'));
  });

  it.each(['/v1/models%00', '/v1/models#fragment'])('%s: a 400 envelope with a request id', async (path) => {
    const r = parseRaw(await get(path));
    expect(r.status).toBe(400);
    expect(r.headers.get('content-type')).toMatch(/^application\/json/);
    const e = JSON.parse(r.body).error;
    expect(e.code).toBe('invalid_request');
    expect(e.request_id).toMatch(UUID);
  });
});

describe('7. over HTTP/2 (h2c)', () => {
  async function h2(path: string, headers: Record<string, string>): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
    const { connect: h2connect } = await import('node:http2');
    const session = h2connect(`http://127.0.0.1:${gatewayPort()}`);
    try {
      return await new Promise((resolve, reject) => {
        const req = session.request({ ':method': 'GET', ':path': path, ...headers });
        let body = '';
        let head: Record<string, unknown> = {};
        req.on('response', (h) => (head = h));
        req.on('data', (d: Buffer) => (body += d.toString()));
        req.on('end', () => resolve({ status: Number(head[':status']), headers: head, body }));
        req.on('error', reject);
        req.end();
      });
    } finally {
      session.close();
    }
  }

  it('a header name with an underscore is dropped, not a stream reset', async () => {
    const r = await h2('/v1/models', { x_api_key: gw.key });
    expect(r.status).toBe(401);
    expect(JSON.parse(r.body).error.code).toBe('invalid_api_key');
    expect((await h2('/v1/models', { 'x-api-key': gw.key, x_other: '1' })).status).toBe(200);
  });

  it('a path Envoy cannot normalise is a 400 envelope', async () => {
    const r = await h2('/v1/models%00', { 'x-api-key': gw.key });
    expect(r.status).toBe(400);
    expect(JSON.parse(r.body).error.request_id).toMatch(UUID);
  });
});

describe('8. what the provider receives is what the gateway validated', () => {
  it('a JSON body labelled text/plain goes up as application/json with its exact content-length', async () => {
    const r = await call(`${gw.base}/chat/completions`, { method: 'POST', key: gw.key, headers: { 'content-type': 'text/plain' }, body: JSON.stringify(chatBody()) });
    expect(r.status, r.text.slice(0, 200)).toBe(200);
    const up = await lastProviderRequest();
    expect(up.headers['content-type']).toBe('application/json');
    expect(up.headers['transfer-encoding']).toBeUndefined();
    expect(Number(up.headers['content-length'])).toBe(Buffer.byteLength(JSON.stringify(up.body)));
  });

  it('a chunked upload goes up with a content-length too', async () => {
    const body = JSON.stringify(chatBody());
    const chunked = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
    const r = parseRaw(
      await rawExchange(`POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-API-Key: ${gw.key}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${chunked}`),
    );
    expect(r.status).toBe(200);
    const up = await lastProviderRequest();
    expect(up.headers['transfer-encoding']).toBeUndefined();
    expect(Number(up.headers['content-length'])).toBe(Buffer.byteLength(JSON.stringify(up.body)));
  });

  it('dimensions on embeddings: any other size is a 400 naming it; 3584 is served and never sent up', async () => {
    const sent = await providerCount();
    for (const dimensions of [7, '3584', 0]) {
      const r = await post(`${gw.base}/embeddings`, { model: 'svc-embed', input: 'x', dimensions }, gw.key);
      expectEnvelope(r, 400, 'invalid_request');
      expect(r.json.error.param).toBe('dimensions');
    }
    expect(await providerCount()).toBe(sent);
    const ok = await post(`${gw.base}/embeddings`, { model: 'svc-embed', input: 'x', dimensions: 3584 }, gw.key);
    expect(ok.status).toBe(200);
    expect(ok.json.data[0].embedding).toHaveLength(3584);
    expect((await lastProviderRequest()).body).not.toHaveProperty('dimensions');
  });

  it('a __proto__ key anywhere is a 400 naming the field, never sent up', async () => {
    const sent = await providerCount();
    const top = await call(`${gw.base}/chat/completions`, { method: 'POST', key: gw.key, body: '{"model":"svc-core","messages":[{"role":"user","content":"hi"}],"__proto__":{"x":1}}' });
    expectEnvelope(top, 400, 'invalid_request');
    expect(top.json.error.param).toBe('__proto__');
    const inner = await call(`${gw.base}/chat/completions`, { method: 'POST', key: gw.key, body: '{"model":"svc-core","messages":[{"role":"user","content":"hi","__proto__":{"x":1}}]}' });
    expectEnvelope(inner, 400, 'invalid_request');
    expect(inner.json.error.param).toBe('messages');
    // In a field of the caller's own naming, the name is the caller's text: never echoed, param is body.
    const own = 'sk-live-OWN-FIELD-NAME';
    const custom = await call(`${gw.base}/chat/completions`, { method: 'POST', key: gw.key, body: `{"model":"svc-core","messages":[{"role":"user","content":"hi"}],"${own}":{"__proto__":{"x":1}}}` });
    expectEnvelope(custom, 400, 'invalid_request');
    expect(custom.json.error.param).toBe('body');
    expect(custom.text).not.toContain(own);
    expect(await providerCount()).toBe(sent);
  });
});

describe('9. only an allow-list of headers reaches the provider', () => {
  const ALLOWED = new Set(['host', 'accept', 'content-type', 'content-length', 'x-request-id', 'x-forwarded-proto', 'authorization', 'accept-encoding', 'connection']);
  const hostile = {
    'openai-organization': 'org-attacker',
    'openai-project': 'proj-attacker',
    'x-envoy-original-path': '/v1/other',
    'x-envoy-original-host': 'evil.example',
    'x-envoy-retry-on': '5xx',
    cookie: 'session=abc',
    'user-agent': 'OpenAI/JS 6.0',
    'x-stainless-os': 'Linux',
    'x-workspace-id': 'ten_x',
    'idempotency-key': 'k1',
  };

  it.each([false, true])('stream %s: nothing else arrives at the simulator, and the provider key replaces the client key', async (stream) => {
    if (stream) {
      const r = await readSse(`${gw.base}/chat/completions`, chatBody({ stream: true }), gw.key);
      expect(r.status).toBe(200);
    }
    const r = await post(`${gw.base}/chat/completions`, chatBody({ stream }), gw.key, { ...hostile, 'x-workspace-id': gw.tenantId });
    expect(r.status, r.text.slice(0, 200)).toBe(200);
    const up = await lastProviderRequest();
    expect(Object.keys(up.headers).filter((h) => !ALLOWED.has(h))).toEqual([]);
    expect(up.headers.authorization).toBe(`Bearer ${gw.upstreamKey}`);
  });
});

describe('10. Envoy headers never reach the caller', () => {
  it('no x-envoy-* on answers, errors or streams', async () => {
    const answers = [
      await post(`${gw.base}/chat/completions`, chatBody(), gw.key),
      await post(`${gw.base}/embeddings`, { model: 'svc-embed', input: 'x' }, gw.key),
      await post(`${gw.base}/chat/completions`, chatBody({ messages: [{ role: 'user', content: '#sim:status=500' }] }), gw.key),
      await call(`${gw.base}/models`, { key: gw.key }),
    ];
    const stream = await readSse(`${gw.base}/chat/completions`, chatBody({ stream: true }), gw.key);
    for (const h of [...answers.map((a) => a.headers), stream.headers]) {
      expect([...h.keys()].filter((k) => k.startsWith('x-envoy'))).toEqual([]);
    }
  });
});

describe('11. a key in the query string is never logged', () => {
  it('neither by the sidecar (refusals, requests) nor by Envoy', async () => {
    // With the memory store the account service runs inside the sidecar's process.
    const names = gw.stack.processes.filter((p) => ['sidecar', 'envoy', 'account'].includes(p.name)).map((p) => p.name);
    await logsCaughtUp(gw); // earlier tests' lines first
    const before = names.map((n) => gw.stack.process(n).lines.length);
    const bogus = `svc_pk_${'Q'.repeat(43)}`;
    await call(`${gw.base}/models?api_key=${bogus}`);
    await call(`${gw.base}/models?key=${gw.key}`);
    await call(`${gw.base}/models?api_key=${gw.key}`, { key: gw.key });
    await post(`${gw.base}/chat/completions?api_key=${gw.key}`, chatBody(), gw.key);
    await call(`${gw.base}/accounts/me?api_key=${gw.key}`);
    await logsCaughtUp(gw); // logs are written asynchronously
    const logs = names.map((n, i) => gw.stack.process(n).lines.slice(before[i]).join('\n')).join('\n');
    expect(logs).toContain('/v1/models'); // the requests were logged …
    expect(logs).not.toContain(bogus); // … without the credentials
    expect(logs).not.toContain(gw.key);
    expect(logs).not.toContain('api_key=');
  });
});

describe('12. the spend-cap answer is true', () => {
  it('a request whose worst case does not fit: a 400 saying what is left and which max_tokens would be served; that one is served', async () => {
    const t = await gw.admin.createTenant('cap');
    const k = await gw.admin.createKey(t.id, {});
    const small = { model: 'svc-core', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] };
    const large = { model: 'svc-core', messages: [{ role: 'user', content: 'hi' }] }; // default max_tokens: 4096
    const cap = holdFor(gw.config, small) * 3;
    expect(holdFor(gw.config, large)).toBeGreaterThan(cap);
    await gw.admin.setCap(t.id, cap);

    const r = await post(`${gw.base}/chat/completions`, large, k.key);
    expectEnvelope(r, 400, 'invalid_request');
    expect(r.json.error.param).toBe('max_tokens');
    expect(r.json.error.message).toContain(`Only ${cap} micro-units`);
    const fits = Number(/at most (\d+) would be served/.exec(r.json.error.message)?.[1]);
    expect(fits).toBeGreaterThanOrEqual(10);
    expect(holdFor(gw.config, { ...large, max_tokens: fits })).toBeLessThanOrEqual(cap);
    expect(holdFor(gw.config, { ...large, max_tokens: fits + 1 })).toBeGreaterThan(cap);

    const served = await post(`${gw.base}/chat/completions`, { ...large, max_tokens: fits }, k.key);
    expect(served.status, served.text.slice(0, 200)).toBe(200);
  });

  it('spend_cap_exceeded only when nothing of the cap is left', async () => {
    const t = await gw.admin.createTenant('cap reached');
    const k = await gw.admin.createKey(t.id, {});
    await gw.admin.setCap(t.id, 0);
    const r = await post(`${gw.base}/chat/completions`, chatBody(), k.key);
    expectEnvelope(r, 429, 'spend_cap_exceeded', 'insufficient_quota');
  });
});

describe('13. account paths: one message for every key failure', () => {
  it('missing, unknown, malformed, revoked and key-as-bearer all get the same 401', async () => {
    const revoked = await gw.admin.createKey(gw.tenantId, { name: 'gone', scopes: ['ai'] });
    await gw.admin.revokeKey(revoked.id);
    const answers = [
      await call(`${gw.base}/accounts/me`),
      await call(`${gw.base}/accounts/me`, { key: `svc_pk_${'B'.repeat(43)}` }),
      await call(`${gw.base}/accounts/me`, { key: 'not-a-key' }),
      await call(`${gw.base}/accounts/me`, { key: revoked.key }),
      await call(`${gw.base}/credits`, { headers: { authorization: `Bearer ${gw.key}` } }),
    ];
    for (const a of answers) expectEnvelope(a, 401, 'AUTH_001', 'authentication_error');
    expect(new Set(answers.map((a) => a.json.error.message)).size).toBe(1);
  });
});

describe('4. streams have a maximum duration', () => {
  it('a stream longer than limits.maxStreamSeconds is ended by Envoy', async () => {
    const short = await startGateway({ config: { limits: { maxStreamSeconds: 2 } } });
    try {
      const r = await readSse(`${short.base}/chat/completions`, { model: 'svc-core', stream: true, max_tokens: 60, messages: [{ role: 'user', content: 'go #sim:tokens=60 #sim:chunk-delay=100' }] }, short.key, { timeoutMs: 15_000 });
      expect(r.status).toBe(200);
      expect(r.events.length).toBeGreaterThan(0);
      expect(r.events).not.toContain('[DONE]'); // cut at 2 s; the whole answer would take 6 s
      expect(r.error).toBeTruthy();
      expect(r.error).not.toMatch(/timeout/);
    } finally {
      await short.stop();
    }
  });
});
