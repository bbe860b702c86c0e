import { createServer, type Server, type ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { startGateway, UUID, type TestGateway } from '../harness/gateway.js';
import { post } from '../harness/http.js';
import { reservePort } from '../harness/ports.js';
import { readSse } from '../harness/sse.js';
import { until } from '../harness/until.js';

let gw: TestGateway;
/**
 * Upstream idle timeout 10 s (the sidecar ends a stream silent for 9 s): for the streams paced slowly
 * enough that a stalled box neither runs them into the idle timeout nor hands a whole burst of
 * events to the gateway in one read, and for the long first token below.
 */
let slow: TestGateway;
const INTERNAL = ['sim-quick-1', 'sim-core-1', 'sim-deep-r1', 'sim-embed-1'];

beforeAll(async () => {
  [gw, slow] = await Promise.all([
    startGateway(), // upstream idle timeout 3 s
    startGateway({ config: { upstream: { idleTimeoutMs: 10_000 } } }),
  ]);
});
afterAll(async () => {
  await Promise.all([gw?.stop(), slow?.stop()]);
});

const streamBody = (content: string, extra: Record<string, unknown> = {}, model = 'svc-core') => ({
  model,
  stream: true,
  messages: [{ role: 'user', content }],
  ...extra,
});
const lastUpstream = async () => {
  const s = await gw.sim('/_sim/stats');
  return s.recent[s.recent.length - 1];
};
const sidecarSummary = (requestId: string, g: TestGateway = gw) =>
  g.stack
    .process('sidecar')
    .lines.map((l) => {
      try {
        return JSON.parse(l);
      } catch {
        return null;
      }
    })
    .find((l) => l?.msg === 'request' && l.request_id === requestId);

const waitForSummary = (requestId: string, g: TestGateway = gw) =>
  until(`the sidecar's line of ${requestId}`, () => Boolean(sidecarSummary(requestId, g)), 10_000).catch(() => {});

/** A gateway whose provider is `answer` (a test's own, called once the request body has arrived); stop() ends both. */
async function ownProvider(answer: (res: ServerResponse) => void | Promise<void>): Promise<{ gateway: TestGateway; stop: () => Promise<void> }> {
  const reserved = await reservePort();
  const gateway = await startGateway({ simulator: false, config: { upstream: { baseUrl: `http://127.0.0.1:${reserved.port}/v1`, idleTimeoutMs: 10_000 } } });
  await reserved.release();
  const provider: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => void answer(res));
  });
  await new Promise<void>((resolve) => provider.listen(reserved.port, '127.0.0.1', () => resolve()));
  return {
    gateway,
    stop: async () => {
      await gateway.stop();
      await new Promise<void>((resolve) => provider.close(() => resolve()));
    },
  };
}

describe('streamed chat completions', () => {
  it('chunk order: deltas, then one final chunk with usage and svc, then [DONE]', async () => {
    const r = await readSse(`${gw.base}/chat/completions`, streamBody('Hello #sim:tokens=5'), gw.key);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const rid = r.headers.get('x-request-id');
    expect(rid).toMatch(UUID);
    expect(r.events[r.events.length - 1]).toBe('[DONE]');
    const chunks = r.events.slice(0, -1).map((e) => JSON.parse(e));
    for (const c of chunks) {
      expect(c).toMatchObject({ id: rid, object: 'chat.completion.chunk', model: 'svc-core' });
    }
    const last = chunks[chunks.length - 1];
    expect(last.choices).toEqual([]);
    expect(last.usage.total_tokens).toBe(last.usage.prompt_tokens + last.usage.completion_tokens);
    expect(last.usage.completion_tokens).toBe(5);
    expect(last.svc).toEqual({ alias: 'svc-core', request_id: rid });
    const earlier = chunks.slice(0, -1);
    expect(earlier.every((c) => c.usage === undefined && c.svc === undefined && c.choices.length === 1)).toBe(true);
    expect(earlier[0].choices[0].delta.role).toBe('assistant');
    const finishes = earlier.filter((c) => c.choices[0].finish_reason !== null);
    expect(finishes).toHaveLength(1);
    expect(finishes[0]).toBe(earlier[earlier.length - 1]);
    const text = earlier.map((c) => c.choices[0].delta.content ?? '').join('');
    expect(text.trim().split(/\s+/)).toHaveLength(5);
    for (const name of INTERNAL) expect(r.raw).not.toContain(name);
  });

  it.each([
    ['1 to 500-byte slices 1 ms apart', '#sim:sliced'],
    ['1 to 7-byte slices (every event in many pieces)', '#sim:slice-max=7 #sim:slice-seed=11'],
    ['slices with several events each', '#sim:slice-max=2000 #sim:slice-gap=3 #sim:slice-seed=5'],
  ])('a provider that writes its stream in uneven slices (%s): every event, usage, [DONE], the alias', async (_name, directive) => {
    const r = await readSse(`${gw.base}/chat/completions`, streamBody(`Hello #sim:tokens=9 ${directive}`, { stream_options: { include_usage: true } }), gw.key);
    expect(r.status).toBe(200);
    expect(r.error).toBeNull();
    expect(r.events[r.events.length - 1]).toBe('[DONE]');
    expect(r.raw.endsWith('data: [DONE]\n\n')).toBe(true);
    const chunks = r.events.slice(0, -1).map((e) => JSON.parse(e));
    expect(chunks).toHaveLength(12); // role + 9 words + finish + usage
    for (const c of chunks) expect(c).toMatchObject({ object: 'chat.completion.chunk', model: 'svc-core' });
    const text = chunks.flatMap((c) => c.choices.map((ch: any) => ch.delta.content ?? '')).join('');
    expect(text.trim().split(/\s+/)).toHaveLength(9);
    expect(chunks.filter((c) => c.choices[0]?.finish_reason === 'stop')).toHaveLength(1);
    const last = chunks[chunks.length - 1];
    expect(last.choices).toEqual([]);
    expect(last.usage).toMatchObject({ completion_tokens: 9 });
    expect(last.svc).toMatchObject({ alias: 'svc-core' });
    for (const name of INTERNAL) expect(r.raw).not.toContain(name);
  });

  it('asks the provider for usage itself, whatever the client sent in stream_options', async () => {
    const r = await readSse(`${gw.base}/chat/completions`, streamBody('Hi', { stream_options: { include_usage: false } }), gw.key);
    const chunks = r.events.slice(0, -1).map((e) => JSON.parse(e));
    expect(chunks[chunks.length - 1].usage).toBeDefined();
    expect((await lastUpstream()).body.stream_options).toEqual({ include_usage: true });
  });

  it('usage put on the finish chunk by the provider still arrives only in the last chunk', async () => {
    const r = await readSse(`${gw.base}/chat/completions`, streamBody('Hi #sim:usage-in-finish'), gw.key);
    const chunks = r.events.slice(0, -1).map((e) => JSON.parse(e));
    expect(chunks.filter((c) => c.usage !== undefined)).toHaveLength(1);
    expect(chunks[chunks.length - 1].usage).toBeDefined();
  });

  it('reasoning text never reaches the client; its tokens count in completion_tokens', async () => {
    const r = await readSse(`${gw.base}/chat/completions`, streamBody('Think #sim:tokens=3 #sim:reasoning=7', {}, 'svc-deep'), gw.key);
    expect(r.raw).not.toMatch(/reasoning/);
    const last = JSON.parse(r.events[r.events.length - 2]!);
    expect(last.usage.completion_tokens).toBe(10);
    const plain = await post(`${gw.base}/chat/completions`, { model: 'svc-deep', messages: [{ role: 'user', content: 'Think #sim:tokens=3 #sim:reasoning=7' }] }, gw.key);
    expect(plain.text).not.toMatch(/reasoning/);
    expect(plain.json.usage.completion_tokens).toBe(10);
  });

  it('streams tool-call deltas intact', async () => {
    const tools = [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] } } }];
    const r = await readSse(`${gw.base}/chat/completions`, streamBody('find it', { tools, tool_choice: 'required' }), gw.key);
    const chunks = r.events.slice(0, -1).map((e) => JSON.parse(e));
    const calls = chunks.flatMap((c) => c.choices.flatMap((ch: any) => ch.delta.tool_calls ?? []));
    expect(calls[0]).toMatchObject({ index: 0, type: 'function', function: { name: 'lookup' } });
    const args = calls.map((t: any) => t.function?.arguments ?? '').join('');
    expect(JSON.parse(args)).toHaveProperty('q');
    expect(chunks.find((c) => c.choices[0]?.finish_reason)?.choices[0].finish_reason).toBe('tool_calls');
  });
});

describe('event by event', () => {
  // A provider that sends each word only once the caller has the one before: a gateway that kept
  // events back (the whole answer, or until more data or some size) leaves it waiting. Causal, not
  // timed: a stalled box delays the exchange but cannot fail it.
  const WORDS = 8;
  let lockstep: TestGateway;
  let stop: () => Promise<void> = async () => {};
  let wordsWithCaller = 0;
  const keptBack: number[] = [];

  beforeAll(async () => {
    ({ gateway: lockstep, stop } = await ownProvider(async (res) => {
      const chunk = (body: Record<string, unknown>) =>
        `data: ${JSON.stringify({ id: 'chatcmpl-lockstep', object: 'chat.completion.chunk', created: 1, model: 'sim-core-1', ...body })}\n\n`;
      const delta = (d: Record<string, unknown>, finish: string | null = null) => chunk({ choices: [{ index: 0, delta: d, finish_reason: finish }] });
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.write(delta({ role: 'assistant', content: '' }));
      for (let i = 0; i < WORDS; i++) {
        res.write(delta({ content: `word${i} ` }));
        await until(`word ${i} with the caller`, () => wordsWithCaller > i, 5_000).catch(() => keptBack.push(i));
      }
      res.write(delta({}, 'stop'));
      res.write(chunk({ choices: [], usage: { prompt_tokens: 3, completion_tokens: WORDS, total_tokens: WORDS + 3 } }));
      res.end('data: [DONE]\n\n');
    }));
  });
  afterAll(() => stop());

  it('delivers each event as the provider sends it (no buffering)', async () => {
    const r = await readSse(`${lockstep.base}/chat/completions`, streamBody('Hi'), lockstep.key, {
      onEvent: (e) => {
        if (e !== '[DONE]' && JSON.parse(e).choices?.[0]?.delta?.content) wordsWithCaller++;
      },
    });
    expect(r.status).toBe(200);
    expect(r.error).toBeNull();
    expect(keptBack).toEqual([]); // every word reached the caller before the provider sent the next one
    expect(wordsWithCaller).toBe(WORDS);
    expect(r.events.at(-1)).toBe('[DONE]');
  });
});

describe('a provider that refuses and reports no usage', () => {
  // Plain refusal deltas (what the rewriter reads without parsing) and no usage chunk: the gateway
  // counts the refusal as generated text, as it counts content, and the caller's usage says so.
  const REFUSAL = 'I cannot help with that request, I am afraid, sorry.'; // 52 characters: 13 tokens at 4 a token
  let refusing: TestGateway;
  let stop: () => Promise<void> = async () => {};

  beforeAll(async () => {
    ({ gateway: refusing, stop } = await ownProvider((res) => {
      const delta = (d: Record<string, unknown>, finish: string | null = null) =>
        `data: ${JSON.stringify({ id: 'chatcmpl-refusal', object: 'chat.completion.chunk', created: 1, model: 'sim-core-1', choices: [{ index: 0, delta: d, finish_reason: finish }] })}\n\n`;
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.write(delta({ role: 'assistant', refusal: REFUSAL.slice(0, 20) }));
      res.write(delta({ refusal: REFUSAL.slice(20) }));
      res.write(delta({}, 'stop'));
      res.end('data: [DONE]\n\n');
    }));
  });
  afterAll(() => stop());

  it('delivers the refusal and counts it in the final usage', async () => {
    const r = await readSse(`${refusing.base}/chat/completions`, streamBody('Hi'), refusing.key);
    expect(r.status).toBe(200);
    expect(r.events.at(-1)).toBe('[DONE]');
    const chunks = r.events.slice(0, -1).map((e) => JSON.parse(e));
    expect(chunks.map((c) => c.choices[0]?.delta?.refusal ?? '').join('')).toBe(REFUSAL);
    const final = chunks.at(-1);
    expect(final.choices).toEqual([]);
    expect(final.usage.completion_tokens).toBe(13);
  });
});

describe('the svc-deep max_tokens floor', () => {
  const deep = (extra: Record<string, unknown>, model = 'svc-deep') =>
    post(`${gw.base}/chat/completions`, { model, messages: [{ role: 'user', content: 'x #sim:tokens=2' }], ...extra }, gw.key);

  it('raises a small max_tokens to 8000 and says so (non-streamed)', async () => {
    const r = await deep({ max_tokens: 100 });
    expect(r.status).toBe(200);
    expect(r.json.svc).toMatchObject({ max_tokens_floor_applied: true, requested_max_tokens: 100, effective_max_tokens: 8000 });
    expect((await lastUpstream()).body.max_tokens).toBe(8000);
  });

  it('applies without max_tokens (requested null), and to the pinned alias and max_completion_tokens', async () => {
    const a = await deep({});
    expect(a.json.svc).toMatchObject({ max_tokens_floor_applied: true, requested_max_tokens: null, effective_max_tokens: 8000 });
    const b = await deep({ max_completion_tokens: 10 }, 'svc-deep-2026-08');
    expect(b.json.svc).toMatchObject({ max_tokens_floor_applied: true, requested_max_tokens: 10, effective_max_tokens: 8000 });
    expect((await lastUpstream()).body.max_completion_tokens).toBe(8000);
  });

  it('max_tokens and max_completion_tokens together: max_completion_tokens decides; both go up with the effective cap', async () => {
    const low = await deep({ max_tokens: 9000, max_completion_tokens: 10 });
    expect(low.json.svc).toMatchObject({ max_tokens_floor_applied: true, requested_max_tokens: 10, effective_max_tokens: 8000 });
    expect((await lastUpstream()).body).toMatchObject({ max_tokens: 8000, max_completion_tokens: 8000 });
    const high = await deep({ max_tokens: 10, max_completion_tokens: 9000 });
    expect(high.json.svc.max_tokens_floor_applied).toBeUndefined();
    expect((await lastUpstream()).body).toMatchObject({ max_tokens: 9000, max_completion_tokens: 9000 });
  });

  it('leaves a large enough max_tokens alone', async () => {
    const r = await deep({ max_tokens: 9000 });
    expect(r.json.svc.max_tokens_floor_applied).toBeUndefined();
    expect(r.json.svc.requested_max_tokens).toBeUndefined();
    expect((await lastUpstream()).body.max_tokens).toBe(9000);
  });

  it('streams carry the floor fields in the final svc block', async () => {
    const r = await readSse(`${gw.base}/chat/completions`, streamBody('x', { max_tokens: 5 }, 'svc-deep'), gw.key);
    const last = JSON.parse(r.events[r.events.length - 2]!);
    expect(last.svc).toMatchObject({ max_tokens_floor_applied: true, requested_max_tokens: 5, effective_max_tokens: 8000 });
  });

  it('never raises svc-quick or svc-core', async () => {
    for (const model of ['svc-quick', 'svc-core-2026-08']) {
      const r = await deep({ max_tokens: 3 }, model);
      expect(r.json.svc.max_tokens_floor_applied).toBeUndefined();
      expect((await lastUpstream()).body.max_tokens).toBe(3);
    }
  });
});

describe('the official openai client iterating a stream', () => {
  it('content, then final usage', async () => {
    const client = new OpenAI({ baseURL: gw.base, apiKey: 'x', defaultHeaders: { 'X-API-Key': gw.key }, maxRetries: 0 });
    const stream = await client.chat.completions.create({ model: 'svc-quick', stream: true, messages: [{ role: 'user', content: 'Hi #sim:tokens=4' }] });
    let text = '';
    let usage: OpenAI.CompletionUsage | undefined | null;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      expect(chunk.model).toBe('svc-quick');
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    expect(chunks).toBeGreaterThan(4);
    expect(text.trim().split(/\s+/)).toHaveLength(4);
    expect(usage?.completion_tokens).toBe(4);
  });

  it('tool calls', async () => {
    const client = new OpenAI({ baseURL: gw.base, apiKey: 'x', defaultHeaders: { 'X-API-Key': gw.key }, maxRetries: 0 });
    const runner = client.chat.completions.stream({
      model: 'svc-core',
      messages: [{ role: 'user', content: 'weather?' }],
      tools: [{ type: 'function', function: { name: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }],
      tool_choice: 'required',
    });
    const final = await runner.finalChatCompletion();
    const call = final.choices[0]?.message.tool_calls?.[0];
    expect(call?.type).toBe('function');
    expect(JSON.parse((call as any).function.arguments)).toHaveProperty('city');
  });
});

describe('provider failures and departures', () => {
  it('before the first byte: the 502 envelope', async () => {
    const r = await post(`${gw.base}/chat/completions`, streamBody('x #sim:status=500'), gw.key);
    expect(r.status).toBe(502);
    expect(r.json.error.code).toBe('upstream_error');
  });

  it('an error event from the provider mid-stream ends the stream with the envelope and request id', async () => {
    // Paced, so the first events reach the caller before the failure (arriving together, the
    // caller would have got nothing yet: that is the clean-502 case tested below). 500 ms apart:
    // only a gateway stalled for over a second would read them together.
    const r = await readSse(`${slow.base}/chat/completions`, streamBody('x #sim:midstream-error-event #sim:chunk-delay=500'), slow.key);
    expect(r.status).toBe(200);
    const last = JSON.parse(r.events[r.events.length - 1]!);
    expect(last.error).toMatchObject({ code: 'upstream_error', type: 'api_error', request_id: r.headers.get('x-request-id') });
    expect(r.events).not.toContain('[DONE]');
  });

  it('a provider chunk that is not JSON mid-stream: the stream ends with the error event, and every event the caller gets is JSON', async () => {
    // The chunk has the shape of every other one but a raw control character in its content:
    // only a parse (or a check as strict) tells it apart; it must not reach the caller.
    const r = await readSse(`${slow.base}/chat/completions`, streamBody('x #sim:midstream-malformed #sim:chunk-delay=500'), slow.key);
    expect(r.status).toBe(200);
    expect(r.error).toBeNull();
    expect(r.events).not.toContain('[DONE]');
    for (const e of r.events) expect(() => JSON.parse(e), e).not.toThrow();
    expect(r.events.join('\n')).not.toContain('\u0001');
    expect(r.events.length).toBe(4); // role + 2 words delivered, then the error event
    const last = JSON.parse(r.events[r.events.length - 1]!);
    expect(last.error).toMatchObject({ code: 'upstream_error', type: 'api_error', request_id: r.headers.get('x-request-id') });
  });

  it('a provider that ends its stream cleanly before any finish_reason: the stream ends with an error event, not a clean end', async () => {
    const r = await readSse(`${slow.base}/chat/completions`, streamBody('x #sim:midstream-end #sim:chunk-delay=500'), slow.key);
    expect(r.status).toBe(200);
    expect(r.error).toBeNull();
    expect(r.events).not.toContain('[DONE]');
    const last = JSON.parse(r.events[r.events.length - 1]!);
    expect(last.error).toMatchObject({ code: 'upstream_error', type: 'api_error', request_id: r.headers.get('x-request-id') });
    expect(r.events.length).toBe(4); // role + 2 words delivered, then the error event
  });

  it('a provider that stops sending: the stream ends with an error event (envelope, request id) before the idle timeout', async () => {
    const started = Date.now();
    const r = await readSse(`${gw.base}/chat/completions`, streamBody('x #sim:hang'), gw.key, { timeoutMs: 15_000 });
    expect(Date.now() - started).toBeLessThan(6000); // nothing hangs
    expect(r.error).toBeNull(); // a clean end before Envoy's idle timeout (3 s) would cut the connection
    expect(r.events).not.toContain('[DONE]');
    const last = JSON.parse(r.events[r.events.length - 1]!);
    expect(last.error).toMatchObject({ code: 'upstream_error', type: 'api_error', request_id: r.headers.get('x-request-id') });
    expect(r.events.length).toBeGreaterThan(1); // the chunks before the stall were delivered
  });

  it.each([
    ['breaks its connection', '#sim:midstream-error'],
    ['sends an error event', '#sim:midstream-error-event'],
    ['ends its stream', '#sim:midstream-end'],
  ])('a provider that %s after its 200 headers but before any event: a clean 502 envelope, not a stream', async (_what, directive) => {
    const r = await post(`${gw.base}/chat/completions`, streamBody(`x ${directive} #sim:fail-after=0`), gw.key);
    expect(r.status).toBe(502);
    expect(r.headers.get('content-type')).toContain('application/json');
    expect(r.json.error).toMatchObject({ code: 'upstream_error', type: 'api_error', request_id: r.headers.get('x-request-id') });
    // Not charged: the sidecar's line has no usage (the billing suite checks the money).
    await waitForSummary(r.headers.get('x-request-id')!);
    const line = sidecarSummary(r.headers.get('x-request-id')!);
    expect(['upstream_error', 'interrupted']).toContain(line.outcome);
    expect(line.completion_tokens).toBeUndefined();
  });

  it('a provider silent after its headers: a clean 502 envelope before the idle timeout, nothing hangs', async () => {
    const started = Date.now();
    const r = await post(`${gw.base}/chat/completions`, streamBody('x #sim:hang #sim:fail-after=0'), gw.key);
    expect(Date.now() - started).toBeLessThan(6000);
    expect(r.status).toBe(502);
    expect(r.json.error).toMatchObject({ code: 'upstream_error', request_id: r.headers.get('x-request-id') });
  });

  it('a provider connection that breaks mid-stream cuts the client stream (Envoy resets it; no [DONE]), nothing hangs', async () => {
    const r = await readSse(`${slow.base}/chat/completions`, streamBody('x #sim:chunk-delay=500 #sim:midstream-error'), slow.key, { timeoutMs: 15_000 });
    expect(r.events).not.toContain('[DONE]');
    expect(r.error).not.toBeNull(); // an upstream reset after the first byte cannot be turned into an event
  });

  it('a client that goes away: the provider request is cancelled and delivered tokens are known', async () => {
    await slow.sim('/_sim/reset', { method: 'POST' });
    // 300 ms a token: the client leaves after 4 events, seconds before a 20th token, even from a stalled box.
    const r = await readSse(`${slow.base}/chat/completions`, streamBody('x #sim:tokens=40 #sim:chunk-delay=300'), slow.key, { abortAfterEvents: 4 });
    const rid = r.headers.get('x-request-id')!;
    let cancelled = 0;
    await until('the provider request cancelled', async () => (cancelled = (await slow.sim('/_sim/stats')).streams.cancelled) > 0, 10_000).catch(() => {});
    expect(cancelled).toBe(1);
    const stats = await slow.sim('/_sim/stats');
    expect(stats.cancellations[0].contentTokensSent).toBeLessThan(40);
    await waitForSummary(rid, slow);
    const summary = sidecarSummary(rid, slow);
    expect(summary).toMatchObject({ outcome: 'interrupted', usage_estimated: true });
    // Counted from what was delivered (about 4 characters a token): at least one per content delta seen, far below 40.
    const delivered = r.events.map((e) => JSON.parse(e)).filter((c) => c.choices?.[0]?.delta?.content).length;
    expect(summary.completion_tokens).toBeGreaterThanOrEqual(delivered);
    expect(summary.completion_tokens).toBeLessThan(20);
  });
});

describe('a long first token', () => {
  it("headers kept back longer than ext_proc's message timeout (5 s) still stream normally", async () => {
    const r = await readSse(`${slow.base}/chat/completions`, streamBody('x #sim:prefill=5500 #sim:tokens=3'), slow.key, { timeoutMs: 15_000 });
    expect(r.status).toBe(200);
    expect(r.error).toBeNull();
    expect(r.events.at(-1)).toBe('[DONE]');
    expect(JSON.parse(r.events.at(-2)!).usage).toMatchObject({ completion_tokens: 3 });
  }, 20_000);
});
