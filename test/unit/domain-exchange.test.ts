/** Exchange: one HTTP exchange driven with plain values, from request headers to summary. */
import { describe, expect, it } from 'vitest';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import type { Principal } from '../../sidecar/src/domain/auth/principal.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { Errors } from '../../sidecar/src/domain/errors.js';
import { type Action, Exchange, type ExchangeDeps } from '../../sidecar/src/domain/exchange.js';

const cfg = parseConfig(defaultConfig('svc'));
const catalog = new Catalog(cfg.models, cfg.brand);
const deps: ExchangeDeps = {
  brand: cfg.brand,
  apiPrefix: '/v1',
  catalog,
  admission: { catalog, defaultTemperature: cfg.defaults.temperature, maxEmbeddingInputs: cfg.limits.maxEmbeddingInputs, maxRequestBytes: 4096 },
  maxResponseBytes: 64 * 1024,
  identityProvider: () => ({ configured: false }),
  usage: async (p, query, requestId) => ({ ok: true, body: JSON.stringify({ object: 'usage', tenant: p.tenantId, query, requestId }) }),
};
const principal: Principal = { subjectId: 'key_1', tenantId: 'ten_1', method: 'api_key', scopes: ['ai'], keyId: 'key_1', role: null };

/** A path the gateway answers at request-header time. */
function start(method: string, path: string, over: { principal?: Principal | null } = {}) {
  const x = new Exchange(deps);
  const action = x.requestHeaders({ method, path, requestId: 'req-1', principal: over.principal === undefined ? principal : over.principal, held: null });
  return { x, action };
}

/** A chat/embeddings exchange as ext_proc sees it: the gate's decision, then the body. */
function begin(method: string, path: string, held: number | null = 100) {
  const x = new Exchange(deps);
  x.start({ method, path, requestId: 'req-1', principal, held });
  return x;
}

function reply(a: Action | Promise<Action>): { status: number; json: Record<string, unknown>; headers: Record<string, string> } {
  if (a instanceof Promise) throw new Error('expected a synchronous action');
  if (a.kind !== 'reply') throw new Error(`expected a reply, got ${a.kind}`);
  return { status: a.status, json: JSON.parse(a.body) as Record<string, unknown>, headers: { ...a.headers } };
}
const errorOf = (a: Action | Promise<Action>) => (reply(a).json as { error: Record<string, unknown> }).error;
const body = (a: Action) => (a.kind === 'continue' && a.body ? a.body.toString() : '');

const chatBody = (extra: Record<string, unknown> = {}) => Buffer.from(JSON.stringify({ model: 'svc-quick', messages: [{ role: 'user', content: 'hi' }], ...extra }));
const completion = JSON.stringify({ id: 'up', model: 'sim-quick-1', choices: [{ index: 0, message: { role: 'assistant', content: 'yo' }, finish_reason: 'stop' }], usage: { prompt_tokens: 2, completion_tokens: 1, total_tokens: 3 } });

function admittedChat(extra: Record<string, unknown> = {}) {
  const x = begin('POST', '/v1/chat/completions');
  const b = x.requestBody(chatBody(extra));
  expect(b.kind).toBe('continue');
  return { x, bodyAction: b };
}

describe('requests answered by the gateway', () => {
  it('GET /models replies with the list; /models/<alias> with one entry', () => {
    const list = reply(start('GET', '/v1/models?x=1').action);
    expect(list.status).toBe(200);
    expect(list.headers['content-type']).toBe('application/json');
    expect((list.json.data as unknown[]).length).toBe(8);
    expect(reply(start('GET', '/v1/models/svc-deep').action).json.id).toBe('svc-deep');
    expect(reply(start('GET', '/v1/models/sim-deep-r1').action).status).toBe(404);
  });

  // BUG: decodeURIComponent throws URIError on a malformed escape; the adapter turns that into a 503.
  it('a malformed escape in /models/<id> is a 404, not an exception', () => {
    expect(reply(start('GET', '/v1/models/%E0%A4%A').action).status).toBe(404);
  });

  it('GET /whoami describes the principal', () => {
    const r = reply(start('GET', '/v1/whoami').action);
    expect(r.json).toEqual({
      object: 'whoami', subject_id: 'key_1', tenant_id: 'ten_1', auth_method: 'api_key', scopes: ['ai'], key_id: 'key_1', role: null,
      identity_provider: { configured: false }, request_id: 'req-1',
    });
  });

  it.each([['POST', '/v1/models'], ['DELETE', '/v1/whoami']])('%s %s → 405', (m, p) => {
    const { x, action } = start(m, p);
    expect(reply(action).status).toBe(405);
    expect(errorOf(action)).toMatchObject({ code: 'method_not_allowed', request_id: 'req-1' });
    expect(x.summary()).toMatchObject({ status: 405, outcome: 'refused', errorCode: 'method_not_allowed' });
  });

  it('GET /usage is answered asynchronously with the report for the principal', async () => {
    const action = await start('GET', '/v1/usage?from=2026-11-01').action;
    expect(reply(action).json).toEqual({ object: 'usage', tenant: 'ten_1', query: 'from=2026-11-01', requestId: 'req-1' });
  });

  it('an unknown route → 404 envelope, even without a principal', () => {
    for (const path of ['/v1/nope', '/v1/chat/completions/x', '/v2/models']) {
      const { action } = start('GET', path, { principal: path === '/v1/nope' ? null : principal });
      expect(reply(action).status).toBe(404);
      expect(errorOf(action)).toEqual({ message: 'Not found.', type: 'not_found_error', param: null, code: null, request_id: 'req-1' });
    }
  });

  it('no principal → 401 invalid_api_key', () => {
    const { action } = start('GET', '/v1/models', { principal: null });
    expect(reply(action).status).toBe(401);
    expect(errorOf(action).code).toBe('invalid_api_key');
  });
});

describe('requests sent upstream', () => {
  it('a body the gate did not hold is not served (fails closed)', () => {
    const x = begin('POST', '/v1/chat/completions', null);
    expect(errorOf(x.requestBody(chatBody()))).toMatchObject({ code: 'credits_unavailable' });
  });

  it.each([['GET', '/v1/chat/completions'], ['PUT', '/v1/embeddings']])('%s %s with a body → 405', (m, p) => {
    expect(reply(begin(m, p).requestBody(chatBody())).status).toBe(405);
  });

  it('rewrites the body and its content-length', () => {
    const { bodyAction } = admittedChat();
    const sent = JSON.parse(body(bodyAction)) as Record<string, unknown>;
    expect(sent).toMatchObject({ model: 'sim-quick-1', temperature: 0.7 });
    expect(bodyAction.kind === 'continue' && bodyAction.headers?.set['content-length']).toBe(String(Buffer.byteLength(body(bodyAction))));
  });

  it('an empty body, invalid JSON, a refused body and an oversize body are replies', () => {
    expect(errorOf(begin('POST', '/v1/embeddings').requestBody(Buffer.alloc(0)))).toMatchObject({ code: 'invalid_request', param: 'body' });
    const bad = begin('POST', '/v1/chat/completions').requestBody(Buffer.from('{'));
    expect(errorOf(bad)).toMatchObject({ code: 'invalid_request', param: 'body' });
    const refused = begin('POST', '/v1/embeddings').requestBody(Buffer.from('{"model":"svc-embed","input":""}'));
    expect(errorOf(refused).code).toBe('SRV_001');
    expect(reply(begin('POST', '/v1/chat/completions').requestBody(Buffer.alloc(4097, 32))).status).toBe(413);
  });
});

describe('responses', () => {
  it('a JSON completion is rewritten; provider headers outside the kept list are removed', () => {
    const { x } = admittedChat();
    const h = x.responseHeaders(200, [':status', 'content-type', 'content-length', 'x-provider-id', 'openai-organization', 'date'], 'application/json');
    expect(h).toEqual({ kind: 'continue', headers: { set: {}, remove: ['x-provider-id', 'openai-organization'] } });
    // The caller's headers wait for the body's end: they carry its rewritten length.
    expect(x.holdsResponseHeaders).toBe(true);
    expect(x.responseBody(Buffer.from(completion.slice(0, 20)), false)).toEqual({ kind: 'continue', body: Buffer.alloc(0), streamed: { endOfStream: false } });
    expect(x.holdsResponseHeaders).toBe(true);
    const last = x.responseBody(Buffer.from(completion.slice(20)), true);
    expect(x.holdsResponseHeaders).toBe(false);
    expect(last.kind === 'continue' && last.streamed).toEqual({ endOfStream: true });
    const out = JSON.parse(body(last)) as Record<string, unknown>;
    expect(out).toMatchObject({ id: 'req-1', model: 'svc-quick', svc: { alias: 'svc-quick', request_id: 'req-1' } });
    expect(last.kind === 'continue' && last.headers?.set['content-length']).toBe(String(Buffer.byteLength(body(last))));
    expect(x.summary()).toMatchObject({
      status: 200, outcome: 'ok', alias: 'svc-quick', stream: false, requestCount: 1, errorCode: null,
      usage: { promptTokens: 2, completionTokens: 1, totalTokens: 3, estimated: false },
    });
  });

  it.each([
    ['a non-2xx status', 503, 'application/json', false],
    ['headers with endOfStream', 200, 'application/json', true],
  ])('%s → 502 reply', (_name, status, ct, eos) => {
    const { x } = admittedChat();
    expect(errorOf(x.responseHeaders(status, [':status'], ct, eos))).toMatchObject({ code: 'upstream_error', type: 'api_error', request_id: 'req-1' });
    expect(x.summary()).toMatchObject({ status: 502, outcome: 'upstream_error', errorCode: 'upstream_error' });
    expect(x.summary().upstreamStatus).toBe(status);
  });

  it('a stream answered without text/event-stream → 502; a bad JSON body → 502', () => {
    const s = admittedChat({ stream: true }).x;
    expect(reply(s.responseHeaders(200, [':status'], 'application/json')).status).toBe(502);
    const j = admittedChat().x;
    j.responseHeaders(200, [':status'], 'application/json');
    expect(reply(j.responseBody(Buffer.from('<html>'), true)).status).toBe(502);
  });

  it('a response for an exchange that never saw request headers (another filter\'s reply) passes through, echoed piece by piece', () => {
    const x = new Exchange(deps);
    expect(x.responseHeaders(403, [':status'], 'application/json')).toEqual({ kind: 'continue' });
    expect(x.holdsResponseHeaders).toBe(false);
    expect(x.responseBody(Buffer.from('{"a"'), false)).toEqual({ kind: 'continue', body: Buffer.from('{"a"'), streamed: { endOfStream: false } });
    expect(x.responseBody(Buffer.from(':1}'), true)).toEqual({ kind: 'continue', body: Buffer.from(':1}'), streamed: { endOfStream: true } });
  });

  it('a JSON answer larger than maxResponseBytes is a 502 that costs nothing; pieces after it change nothing', () => {
    const { x } = admittedChat();
    x.responseHeaders(200, [':status'], 'application/json');
    const piece = Buffer.alloc(deps.maxResponseBytes / 2, 32);
    expect(x.responseBody(piece, false)).toMatchObject({ kind: 'continue', streamed: { endOfStream: false } });
    expect(x.responseBody(piece, false)).toMatchObject({ kind: 'continue', streamed: { endOfStream: false } }); // exactly the limit
    expect(reply(x.responseBody(Buffer.from(' '), false)).status).toBe(502);
    expect(x.holdsResponseHeaders).toBe(false);
    expect(x.responseBody(Buffer.from(completion), true)).toEqual({ kind: 'continue' });
    expect(x.summary()).toMatchObject({ status: 502, outcome: 'upstream_error', billable: null });
  });

  it('a JSON answer in one piece is not copied before its rewrite; an empty last piece ends a collected one', () => {
    const { x } = admittedChat();
    x.responseHeaders(200, [':status'], 'application/json');
    x.responseBody(Buffer.from(completion), false);
    const last = x.responseBody(Buffer.alloc(0), true);
    expect(JSON.parse(body(last))).toMatchObject({ model: 'svc-quick' });
    expect(x.summary()).toMatchObject({ status: 200, outcome: 'ok' });
  });

  it('a stream is rewritten chunk by chunk, each piece streamed, the last one ending the body', () => {
    const { x } = admittedChat({ stream: true });
    const h = x.responseHeaders(200, [':status', 'content-type', 'x-ratelimit-remaining'], 'text/event-stream; charset=utf-8');
    expect(h).toEqual({ kind: 'continue', headers: { set: {}, remove: ['x-ratelimit-remaining', 'content-length'] } });
    expect(x.streaming).toBe(true);
    const chunk = (c: unknown) => Buffer.from(`data: ${JSON.stringify(c)}\n\n`);
    const firstAction = x.responseBody(chunk({ model: 'sim-quick-1', created: 1, choices: [{ index: 0, delta: { content: 'hi' } }] }), false);
    expect(firstAction.kind === 'continue' && firstAction.streamed).toEqual({ endOfStream: false });
    expect(JSON.parse(body(firstAction).slice(6))).toMatchObject({ id: 'req-1', model: 'svc-quick', choices: [{ delta: { content: 'hi' } }] });
    const lastAction = x.responseBody(Buffer.from('data: [DONE]\n\n'), true);
    expect(lastAction.kind === 'continue' && lastAction.streamed).toEqual({ endOfStream: true });
    expect(body(lastAction).endsWith('data: [DONE]\n\n')).toBe(true);
    expect(x.streaming).toBe(false);
    expect(x.responseBody(Buffer.from('data: [DONE]\n\n'), true)).toEqual({ kind: 'continue' }); // a re-delivered last chunk
    expect(x.summary()).toMatchObject({ status: 200, stream: true, outcome: 'ok', usage: { estimated: true } });
  });

  it('a stalled stream ends with one error event in the envelope; nothing after it', () => {
    const { x } = admittedChat({ stream: true });
    x.responseHeaders(200, [':status'], 'text/event-stream');
    x.responseBody(Buffer.from(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'partial answer' } }] })}\n\n`), false);
    const stalled = x.streamStalled();
    expect(stalled.kind === 'continue' && stalled.streamed).toEqual({ endOfStream: true });
    expect(JSON.parse(body(stalled).slice(6)).error).toMatchObject({ code: 'upstream_error', request_id: 'req-1' });
    expect(x.streaming).toBe(false);
    expect(x.streamStalled()).toEqual({ kind: 'continue' });
    const s = x.summary();
    expect(s).toMatchObject({ outcome: 'upstream_error', usage: { estimated: true } });
    expect(s.billable?.completionTokens).toBeGreaterThan(0); // what was delivered is billed
  });

  it('a stop\'s drain deadline ends a stream: mid-stream one service_unavailable error event, charged for what was delivered; before the first event a 503 that costs nothing', () => {
    const { x } = admittedChat({ stream: true });
    x.responseHeaders(200, [':status'], 'text/event-stream');
    x.responseBody(Buffer.from(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'partial answer' } }] })}\n\n`), false);
    const cut = x.endStreamNow(Errors.restarting);
    expect(cut.kind === 'continue' && cut.streamed).toEqual({ endOfStream: true });
    expect(body(cut)).not.toContain('[DONE]');
    expect(JSON.parse(body(cut).slice(6)).error).toMatchObject({ code: 'service_unavailable', type: 'api_error', request_id: 'req-1' });
    const s = x.summary();
    expect(s).toMatchObject({ outcome: 'upstream_error', errorCode: 'service_unavailable' });
    expect(s.billable?.completionTokens).toBeGreaterThan(0);

    const early = admittedChat({ stream: true }).x;
    early.responseHeaders(200, [':status'], 'text/event-stream');
    expect(early.endStreamNow(Errors.restarting)).toMatchObject({ kind: 'reply', status: 503, headers: { 'Retry-After': '1' } });
    expect(early.summary()).toMatchObject({ status: 503, billable: null });
  });

  it('until the first event the answer is not committed: headers wait, and a stall is a clean 502 that costs nothing', () => {
    const { x } = admittedChat({ stream: true });
    x.responseHeaders(200, [':status'], 'text/event-stream');
    expect(x.awaitingFirstEvent).toBe(true);
    // A reasoning-only event gives the caller nothing yet.
    const hidden = x.responseBody(Buffer.from(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { reasoning_content: 'thinking' } }] })}\n\n`), false);
    expect(body(hidden)).toBe('');
    expect(x.awaitingFirstEvent).toBe(true);
    const stalled = x.streamStalled();
    expect(stalled).toMatchObject({ kind: 'reply', status: 502 });
    expect(JSON.parse((stalled as { body: string }).body).error).toMatchObject({ code: 'upstream_error', request_id: 'req-1' });
    expect(x.streaming).toBe(false);
    expect(x.summary()).toMatchObject({ status: 502, outcome: 'upstream_error', billable: null });
  });

  it('a provider error as the first event, or a stream that ends empty, is a clean 502', () => {
    for (const first of [`data: ${JSON.stringify({ error: { message: 'overloaded sim-core-1' } })}\n\n`, '']) {
      const { x } = admittedChat({ stream: true });
      x.responseHeaders(200, [':status'], 'text/event-stream');
      expect(x.responseBody(Buffer.from(first), first === '')).toMatchObject({ kind: 'reply', status: 502 });
      expect(x.summary()).toMatchObject({ outcome: 'upstream_error', billable: null });
    }
  });

  it('the first event commits the answer: later failures end the stream with an error event', () => {
    const { x } = admittedChat({ stream: true });
    x.responseHeaders(200, [':status'], 'text/event-stream');
    x.responseBody(Buffer.from(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { role: 'assistant', content: '' } }] })}\n\n`), false);
    expect(x.awaitingFirstEvent).toBe(false);
    const failed = x.responseBody(Buffer.from(`data: ${JSON.stringify({ error: { message: 'boom' } })}\n\n`), false);
    expect(failed.kind).toBe('continue');
    expect(JSON.parse(body(failed).slice(6)).error).toMatchObject({ code: 'upstream_error' });
  });

  it('abandon() mid-stream records estimated usage and outcome interrupted', () => {
    const { x } = admittedChat({ stream: true });
    x.responseHeaders(200, [':status'], 'text/event-stream');
    x.responseBody(Buffer.from(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'abcdefgh' } }] })}\n\n`), false);
    expect(x.summary().outcome).toBe('incomplete');
    x.abandon();
    const s = x.summary();
    expect(s.outcome).toBe('interrupted');
    expect(s.usage).toMatchObject({ completionTokens: 2, estimated: true });
    expect(s.usage?.promptTokens).toBeGreaterThan(0);
  });

  it('abandon() after a completed exchange changes nothing', () => {
    const { x } = admittedChat();
    x.responseHeaders(200, [':status'], 'application/json');
    x.responseBody(Buffer.from(completion), true);
    x.abandon();
    expect(x.summary().outcome).toBe('ok');
  });
});

/** What an exchange is charged for (summary().billable): the money decision at its end. */
describe('what is billable', () => {
  const sse = (c: unknown) => Buffer.from(`data: ${JSON.stringify(c)}\n\n`);
  const streaming = () => {
    const { x } = admittedChat({ stream: true });
    x.responseHeaders(200, [':status'], 'text/event-stream');
    return x;
  };

  it('a JSON answer delivered: the provider usage', () => {
    const { x } = admittedChat();
    x.responseHeaders(200, [':status'], 'application/json');
    x.responseBody(Buffer.from(completion), true);
    expect(x.summary().billable).toEqual({ promptTokens: 2, completionTokens: 1, totalTokens: 3, estimated: false });
  });

  it('a JSON request whose client left before the answer, or whose provider failed: nothing', () => {
    const left = admittedChat().x;
    left.abandon();
    expect(left.summary().billable).toBeNull();
    const failed = admittedChat().x;
    failed.responseHeaders(500, [':status'], 'application/json');
    expect(failed.summary().billable).toBeNull();
  });

  it('a stream abandoned after its first event: the prompt and what was delivered; before it: nothing', () => {
    const after = streaming();
    after.responseBody(sse({ choices: [{ index: 0, delta: { content: 'abcdefgh' } }] }), false);
    after.abandon();
    expect(after.summary().billable).toMatchObject({ completionTokens: 2, estimated: true });
    const before = streaming();
    before.abandon();
    expect(before.summary()).toMatchObject({ outcome: 'interrupted', billable: null });
  });

  it('a stream the provider broke off after delivering: what was delivered; one that delivered nothing: nothing', () => {
    const broken = streaming();
    broken.responseBody(sse({ choices: [{ index: 0, delta: { content: 'abcdefgh' } }] }), false);
    broken.responseBody(sse({ error: { message: 'boom' } }), false);
    broken.responseBody(Buffer.alloc(0), true); // the provider closes after its error
    const s = broken.summary();
    expect(s.outcome).toBe('upstream_error');
    expect(s.billable?.completionTokens).toBeGreaterThan(0);
    const empty = streaming();
    empty.responseBody(sse({ choices: [{ index: 0, delta: { role: 'assistant', content: '' } }] }), false);
    empty.responseBody(sse({ error: { message: 'boom' } }), false);
    empty.responseBody(Buffer.alloc(0), true);
    expect(empty.summary()).toMatchObject({ outcome: 'upstream_error', billable: null });
  });

  it('a stream that completes: the provider usage from its last chunk', () => {
    const x = streaming();
    x.responseBody(sse({ choices: [{ index: 0, delta: { content: 'hi' }, finish_reason: 'stop' }] }), false);
    x.responseBody(sse({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 } }), false);
    x.responseBody(Buffer.from('data: [DONE]\n\n'), true);
    expect(x.summary()).toMatchObject({ outcome: 'ok', billable: { promptTokens: 5, completionTokens: 1, totalTokens: 6, estimated: false } });
  });
});

describe('provider statuses and content types', () => {
  it('any 2xx is an answer; 199 and 300 are provider failures (502)', () => {
    for (const status of [200, 201, 299]) {
      const { x } = admittedChat();
      expect(x.responseHeaders(status, [':status'], 'application/json').kind).toBe('continue');
    }
    for (const status of [199, 300]) {
      const { x } = admittedChat();
      expect(reply(x.responseHeaders(status, [':status'], 'application/json')).status).toBe(502);
    }
  });

  it('a stream answered without any content type: 502, not an exception', () => {
    const { x } = admittedChat({ stream: true });
    expect(reply(x.responseHeaders(200, [':status'], undefined)).status).toBe(502);
  });
});
