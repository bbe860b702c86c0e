import OpenAI from 'openai';
import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { createSimulator, type Simulator } from '../../sidecar/simulator/server.js';
import { nextDue, SseWriter } from '../../sidecar/simulator/sse.js';
import { until } from '../harness/until.js';

let sim: Simulator;
let base: string;

beforeAll(async () => {
  sim = createSimulator();
  const { port } = await sim.listen(0, '127.0.0.1');
  base = `http://127.0.0.1:${port}`;
});

afterAll(async () => {
  await sim.close();
});

beforeEach(() => {
  sim.stats.reset();
  Object.assign(sim.config, { latencyMs: 0, chunkDelayMs: 0, forceStatus: null });
});

type Json = Record<string, any>;

function post(path: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<Response> {
  return fetch(base + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
    signal,
  });
}

function chat(content: string, extra: Json = {}, headers: Record<string, string> = {}): Promise<Response> {
  return post('/v1/chat/completions', { model: 'sim-core-1', messages: [{ role: 'user', content }], ...extra }, headers);
}

/** Reads a whole SSE body into its data payloads. */
async function sseData(res: Response): Promise<string[]> {
  const text = await res.text();
  return text
    .split('\n\n')
    .filter((e) => e.startsWith('data: '))
    .map((e) => e.slice('data: '.length));
}

function chunks(data: string[]): Json[] {
  return data.filter((d) => d !== '[DONE]').map((d) => JSON.parse(d) as Json);
}

/** Reads SSE events from a streaming fetch until `count` have arrived. */
async function readEvents(reader: ReadableStreamDefaultReader<Uint8Array>, count: number): Promise<string[]> {
  const decoder = new TextDecoder();
  let buf = '';
  const events: string[] = [];
  while (events.length < count) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      events.push(buf.slice(0, i));
      buf = buf.slice(i + 2);
    }
  }
  return events;
}

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string' },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
        days: { type: 'integer', minimum: 1 },
        hourly: { type: 'boolean' },
        tags: { type: 'array', items: { type: 'string' } },
        optional: { type: 'string' },
      },
      required: ['city', 'unit', 'days', 'hourly', 'tags'],
    },
  },
};

describe('models', () => {
  it('lists the configured model ids', async () => {
    const res = await fetch(`${base}/v1/models`);
    const body = (await res.json()) as Json;
    expect(body.object).toBe('list');
    expect(body.data.map((m: Json) => m.id)).toEqual(['sim-quick-1', 'sim-core-1', 'sim-deep-r1', 'sim-embed-1']);
    expect(body.data[0]).toMatchObject({ object: 'model', owned_by: 'simulator' });
  });
});

describe('chat completions (non-streaming)', () => {
  it('answers with the OpenAI shape and consistent usage', async () => {
    const res = await post('/v1/chat/completions', {
      model: 'any-model-id',
      messages: [
        { role: 'system', content: 'You are terse.' }, // 14 chars
        { role: 'user', content: [{ type: 'text', text: 'Hello there!' }] }, // 12 chars
      ],
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    const body = (await res.json()) as Json;
    expect(body.id).toMatch(/^chatcmpl-/);
    expect(body.object).toBe('chat.completion');
    expect(body.model).toBe('any-model-id');
    expect(typeof body.created).toBe('number');
    expect(body.choices).toHaveLength(1);
    const choice = body.choices[0];
    expect(choice.index).toBe(0);
    expect(choice.finish_reason).toBe('stop');
    expect(choice.message.role).toBe('assistant');
    expect(choice.message.content.split(' ')).toHaveLength(16);
    expect(choice.message.reasoning_content).toBeUndefined();
    expect(body.usage).toEqual({ prompt_tokens: Math.ceil(26 / 4), completion_tokens: 16, total_tokens: 7 + 16 });
  });

  it('is deterministic and ids are unique', async () => {
    const a = (await (await chat('same')).json()) as Json;
    const b = (await (await chat('same')).json()) as Json;
    expect(a.choices[0].message.content).toBe(b.choices[0].message.content);
    expect(a.id).not.toBe(b.id);
    expect(a.usage.prompt_tokens).toBe(1);
  });

  it('truncates at max_tokens / max_completion_tokens with finish_reason length', async () => {
    const a = (await (await chat('hi', { max_tokens: 5 })).json()) as Json;
    expect(a.choices[0].finish_reason).toBe('length');
    expect(a.choices[0].message.content.split(' ')).toHaveLength(5);
    expect(a.usage.completion_tokens).toBe(5);

    const b = (await (await chat('hi #sim:tokens=40', { max_completion_tokens: 30, max_tokens: 3 })).json()) as Json;
    expect(b.usage.completion_tokens).toBe(30);
    expect(b.choices[0].finish_reason).toBe('length');

    const c = (await (await chat('hi #sim:tokens=4', { max_tokens: 4 })).json()) as Json;
    expect(c.choices[0].finish_reason).toBe('stop');
    expect(c.usage.completion_tokens).toBe(4);
  });

  it('rejects malformed requests with OpenAI-style 400s', async () => {
    for (const body of [{ messages: [] }, { model: 'm' }, { model: 'm', messages: 'hi' }, { model: 'm', messages: [{ role: 'user', content: 'x' }], max_tokens: 0 }]) {
      const res = await post('/v1/chat/completions', body);
      expect(res.status).toBe(400);
      const err = ((await res.json()) as Json).error;
      expect(err.type).toBe('invalid_request_error');
      expect(typeof err.message).toBe('string');
      expect(err).toHaveProperty('param');
      expect(err).toHaveProperty('code');
    }
    const bad = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{nope' });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as Json).error.type).toBe('invalid_request_error');
  });

  it('gives reasoning models reasoning_content and reasoning usage', async () => {
    const res = await chat('think', { model: 'sim-deep-r1' });
    const body = (await res.json()) as Json;
    const msg = body.choices[0].message;
    expect(msg.reasoning_content.split(' ')).toHaveLength(24);
    expect(msg.content.split(' ')).toHaveLength(16);
    expect(body.usage.completion_tokens).toBe(40);
    expect(body.usage.completion_tokens_details).toEqual({ reasoning_tokens: 24 });
    expect(body.usage.total_tokens).toBe(body.usage.prompt_tokens + 40);
  });

  it('applies max_tokens to reasoning plus visible tokens', async () => {
    const starved = (await (await chat('think', { model: 'sim-deep-r1', max_tokens: 20 })).json()) as Json;
    expect(starved.choices[0].message.content).toBe('');
    expect(starved.choices[0].finish_reason).toBe('length');
    expect(starved.usage.completion_tokens_details.reasoning_tokens).toBe(20);
    expect(starved.usage.completion_tokens).toBe(20);

    const some = (await (await chat('think #sim:reasoning=3 #sim:tokens=10', { model: 'sim-deep-r1', max_tokens: 5 })).json()) as Json;
    expect(some.choices[0].message.reasoning_content.split(' ')).toHaveLength(3);
    expect(some.choices[0].message.content.split(' ')).toHaveLength(2);
    expect(some.usage.completion_tokens).toBe(5);
  });

  it('answers tool calls with JSON arguments built from the schema', async () => {
    for (const extra of [
      { tools: [weatherTool], tool_choice: 'required' },
      { tools: [{ type: 'function', function: { name: 'other', parameters: { type: 'object' } } }, weatherTool], tool_choice: { type: 'function', function: { name: 'get_weather' } } },
    ]) {
      const body = (await (await chat('weather?', extra)).json()) as Json;
      expect(body.choices[0].finish_reason).toBe('tool_calls');
      const msg = body.choices[0].message;
      expect(msg.content).toBeNull();
      expect(msg.tool_calls).toHaveLength(1);
      const call = msg.tool_calls[0];
      expect(call.id).toMatch(/^call_/);
      expect(call.type).toBe('function');
      expect(call.function.name).toBe('get_weather');
      const args = JSON.parse(call.function.arguments) as Json;
      expect(Object.keys(args).sort()).toEqual(['city', 'days', 'hourly', 'tags', 'unit']);
      expect(args.unit).toBe('celsius');
      expect(Number.isInteger(args.days)).toBe(true);
      expect(typeof args.hourly).toBe('boolean');
      expect(Array.isArray(args.tags)).toBe(true);
    }
  });

  it('answers text with tool_choice auto unless the tool directive asks', async () => {
    const auto = (await (await chat('weather?', { tools: [weatherTool] })).json()) as Json;
    expect(auto.choices[0].finish_reason).toBe('stop');
    expect(typeof auto.choices[0].message.content).toBe('string');
    const forced = (await (await chat('weather? #sim:tool', { tools: [weatherTool], tool_choice: 'auto' })).json()) as Json;
    expect(forced.choices[0].message.tool_calls[0].function.name).toBe('get_weather');
  });
});

describe('chat completions (streaming)', () => {
  it('streams role, content words, finish, then [DONE] without usage by default', async () => {
    const res = await chat('hi #sim:tokens=4', { stream: true });
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const data = await sseData(res);
    expect(data.at(-1)).toBe('[DONE]');
    const c = chunks(data);
    expect(c).toHaveLength(1 + 4 + 1);
    for (const chunk of c) {
      expect(chunk.object).toBe('chat.completion.chunk');
      expect(chunk.model).toBe('sim-core-1');
      expect(chunk.id).toBe(c[0]?.id);
      expect(chunk.usage).toBeUndefined();
    }
    expect(c[0]?.choices[0]).toMatchObject({ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null });
    const text = c.slice(1, 5).map((x) => x.choices[0].delta.content as string).join('');
    const whole = (await (await chat('hi #sim:tokens=4')).json()) as Json;
    expect(text).toBe(whole.choices[0].message.content);
    expect(c[5]?.choices[0]).toMatchObject({ delta: {}, finish_reason: 'stop' });
  });

  it('sends a usage chunk with choices [] only when include_usage is set', async () => {
    const data = await sseData(await chat('hello world #sim:tokens=3', { stream: true, stream_options: { include_usage: true } }));
    const c = chunks(data);
    const last = c.at(-1) as Json;
    expect(last.choices).toEqual([]);
    expect(last.usage).toEqual({ prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 });
    expect(c.at(-2)?.choices[0].finish_reason).toBe('stop');
    expect(c.slice(0, -1).every((x) => x.usage === null)).toBe(true);
    expect(data.at(-1)).toBe('[DONE]');
    await until('the stream completed', () => sim.stats.streamsCompleted === 1);
    expect(sim.stats.snapshot().streams).toEqual({ started: 1, completed: 1, cancelled: 0, active: 0 });

    const none = chunks(await sseData(await chat('x #sim:no-usage', { stream: true, stream_options: { include_usage: true } })));
    expect(none.some((x) => x.usage)).toBe(false);

    const inFinish = chunks(await sseData(await chat('x #sim:usage-in-finish #sim:tokens=2', { stream: true, stream_options: { include_usage: true } })));
    expect(inFinish.at(-1)?.choices[0].finish_reason).toBe('stop');
    expect(inFinish.at(-1)?.usage.completion_tokens).toBe(2);
  });

  it('streams reasoning deltas before content for reasoning models', async () => {
    const c = chunks(await sseData(await chat('x #sim:reasoning=3 #sim:tokens=2', { model: 'sim-deep-r1', stream: true, stream_options: { include_usage: true } })));
    const deltas = c.filter((x) => x.choices.length > 0).map((x) => x.choices[0].delta);
    expect(deltas.map((d) => Object.keys(d).join())).toEqual([
      'role,content', 'reasoning_content', 'reasoning_content', 'reasoning_content', 'content', 'content', '',
    ]);
    expect(c.at(-1)?.usage).toMatchObject({ completion_tokens: 5, completion_tokens_details: { reasoning_tokens: 3 } });
  });

  it('streams tool calls whose argument fragments reassemble to valid JSON', async () => {
    const c = chunks(await sseData(await chat('weather?', { stream: true, tools: [weatherTool], tool_choice: 'required' })));
    const toolDeltas = c.flatMap((x) => x.choices[0]?.delta?.tool_calls ?? []) as Json[];
    expect(toolDeltas[0]).toMatchObject({ index: 0, type: 'function', function: { name: 'get_weather', arguments: '' } });
    expect(toolDeltas[0]?.id).toMatch(/^call_/);
    expect(toolDeltas.length).toBeGreaterThan(2);
    expect(toolDeltas.slice(1).every((d) => d.index === 0 && d.id === undefined)).toBe(true);
    const args = toolDeltas.map((d) => d.function.arguments as string).join('');
    expect(JSON.parse(args)).toHaveProperty('city');
    expect(c.at(-1)?.choices[0].finish_reason).toBe('tool_calls');
  });

  it('writes chunks separately, spaced by the chunk delay', async () => {
    const started = Date.now();
    const res = await chat('x #sim:tokens=3 #sim:chunk-delay=40', { stream: true });
    const reader = res.body!.getReader();
    let reads = 0;
    while (!(await reader.read()).done) reads++;
    expect(reads).toBeGreaterThanOrEqual(5); // role, 3 words, finish (+ [DONE])
    expect(Date.now() - started).toBeGreaterThanOrEqual(4 * 40 - 10);
  });
});

describe('chunk delays keep the provider\'s clock', () => {
  it('each wait ends a delay after the last one was due, so a late timer does not push back the rest of the stream', () => {
    expect(nextDue(null, 1000, 5)).toBe(1005);
    // The timer fired 3 ms late and the write took 0.5 ms: the next event is still due on the clock.
    expect(nextDue(1005, 1008.5, 5)).toBe(1010);
    expect(nextDue(1010, 1010.2, 5)).toBe(1015);
  });

  it('a stream that fell more than a delay behind resumes 1 ms later and keeps its pace from there, without a burst', () => {
    const first = nextDue(1015, 1100, 5); // a slow reader held it back 85 ms
    expect(first).toBe(1101);
    expect(nextDue(first, 1101.3, 5)).toBe(1106);
  });

  it('the writer waits on that clock: after a wait that ended 3 ms late, the next 5 ms delay is 2 ms', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    try {
      const w = new SseWriter(new EventEmitter() as unknown as ServerResponse, () => {});
      let done = false;
      const first = w.pause(5)!.then(() => (done = true));
      await vi.advanceTimersByTimeAsync(5);
      expect(done).toBe(true);
      await first;
      await vi.advanceTimersByTimeAsync(3); // the process was busy: the next wait starts 3 ms after it was due
      done = false;
      const second = w.pause(5)!.then(() => (done = true));
      await vi.advanceTimersByTimeAsync(1);
      expect(done).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      expect(done).toBe(true);
      await second;
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('embeddings', () => {
  it('returns one deterministic unit vector per input', async () => {
    const res = await post('/v1/embeddings', { model: 'sim-embed-1', input: ['alpha', 'beta', 'alpha'] });
    const body = (await res.json()) as Json;
    expect(body.object).toBe('list');
    expect(body.model).toBe('sim-embed-1');
    expect(body.data).toHaveLength(3);
    body.data.forEach((d: Json, i: number) => {
      expect(d).toMatchObject({ object: 'embedding', index: i });
      expect(d.embedding).toHaveLength(3584);
      const norm = Math.sqrt((d.embedding as number[]).reduce((s, x) => s + x * x, 0));
      expect(norm).toBeCloseTo(1, 5);
    });
    expect(body.data[0].embedding).toEqual(body.data[2].embedding);
    expect(body.data[0].embedding).not.toEqual(body.data[1].embedding);
    expect(body.usage).toEqual({ prompt_tokens: 2 + 1 + 2, total_tokens: 5 });

    const again = (await (await post('/v1/embeddings', { model: 'x', input: 'alpha' })).json()) as Json;
    expect(again.data[0].embedding).toEqual(body.data[0].embedding);
  });

  it('encodes base64 as float32 little-endian', async () => {
    const floats = (await (await post('/v1/embeddings', { model: 'e', input: 'gamma' })).json()) as Json;
    const b64 = (await (await post('/v1/embeddings', { model: 'e', input: 'gamma', encoding_format: 'base64' })).json()) as Json;
    const buf = Buffer.from(b64.data[0].embedding as string, 'base64');
    expect(buf.length).toBe(3584 * 4);
    const decoded = Array.from({ length: 3584 }, (_, i) => buf.readFloatLE(i * 4));
    decoded.forEach((x, i) => expect(x).toBeCloseTo(floats.data[0].embedding[i] as number, 7));
  });

  it('accepts token arrays and rejects missing or empty input', async () => {
    const tok = (await (await post('/v1/embeddings', { model: 'e', input: [[1, 2, 3], [4, 5]] })).json()) as Json;
    expect(tok.data).toHaveLength(2);
    expect(tok.usage.prompt_tokens).toBe(5);
    for (const body of [{ model: 'e' }, { model: 'e', input: '' }, { model: 'e', input: [] }, { model: 'e', input: ['ok', ''] }]) {
      const res = await post('/v1/embeddings', body);
      expect(res.status).toBe(400);
      expect(((await res.json()) as Json).error.type).toBe('invalid_request_error');
    }
  });
});

describe('directives', () => {
  it('status=500 answers an OpenAI server error', async () => {
    const res = await chat('x #sim:status=500');
    expect(res.status).toBe(500);
    const err = ((await res.json()) as Json).error;
    expect(err).toMatchObject({ type: 'server_error' });
    expect(err).toHaveProperty('param');
    expect(err).toHaveProperty('code');
  });

  it('status=400 and context-overflow answer context_length_exceeded naming the model', async () => {
    for (const d of ['#sim:status=400', '#sim:context-overflow']) {
      const res = await chat(`x ${d}`, { model: 'sim-quick-1' });
      expect(res.status).toBe(400);
      const err = ((await res.json()) as Json).error;
      expect(err.code).toBe('context_length_exceeded');
      expect(err.type).toBe('invalid_request_error');
      expect(err.message).toContain('sim-quick-1');
    }
  });

  it('reads directives from the x-sim-directive header and embeddings inputs', async () => {
    expect((await chat('x', {}, { 'x-sim-directive': 'status=429' })).status).toBe(429);
    expect((await chat('x', {}, { 'x-sim-directive': '#sim:tokens=2, #sim:status=503' })).status).toBe(503);
    expect((await post('/v1/embeddings', { model: 'e', input: ['ok', 'bad #sim:status=502'] })).status).toBe(502);
  });

  it('empty answers 200 with an empty body; garbage with non-JSON', async () => {
    const empty = await chat('x #sim:empty');
    expect(empty.status).toBe(200);
    expect(await empty.text()).toBe('');
    const garbage = await chat('x #sim:garbage');
    expect(garbage.status).toBe(200);
    const text = await garbage.text();
    expect(text.length).toBeGreaterThan(0);
    expect(() => JSON.parse(text)).toThrow();
  });

  it('delay holds the headers back', async () => {
    const started = Date.now();
    const res = await chat('x #sim:delay=150');
    expect(res.status).toBe(200);
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
  });

  it('reset destroys the connection without an answer', async () => {
    await expect(chat('x #sim:reset')).rejects.toThrow();
    await expect(post('/v1/embeddings', { model: 'e', input: 'x #sim:reset' })).rejects.toThrow();
  });

  it('midstream-error drops the connection after two generated chunks', async () => {
    const res = await chat('x #sim:midstream-error', { stream: true });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const got: string[] = [];
    await expect(
      (async () => {
        got.push(...(await readEvents(reader, 100)));
      })(),
    ).rejects.toThrow();
    const s = sim.stats.snapshot();
    expect(s.cancelledStreams).toBe(0);
    expect(s.streams.active).toBe(0);
  });

  it('midstream-error-event sends an error event and ends without [DONE]', async () => {
    const data = await sseData(await chat('x #sim:midstream-error-event', { stream: true }));
    expect(data).toHaveLength(4); // role + 2 words + error
    expect(JSON.parse(data[3] as string).error.type).toBe('server_error');
    expect(data).not.toContain('[DONE]');
  });

  it('midstream-malformed sends, after 2 words, a chunk that is not JSON (a raw control character), then ends', async () => {
    const data = await sseData(await chat('x #sim:midstream-malformed', { stream: true }));
    expect(data).toHaveLength(4); // role + 2 words + the malformed chunk
    expect(data[3]).toContain('\u0001');
    expect(() => JSON.parse(data[3] as string)).toThrow();
    expect(data).not.toContain('[DONE]');
  });

  it('midstream-end ends the response cleanly after 2 words: no finish_reason, no [DONE]', async () => {
    const data = await sseData(await chat('x #sim:midstream-end', { stream: true }));
    expect(data).toHaveLength(3); // role + 2 words
    expect(data.map((d) => JSON.parse(d as string).choices[0].finish_reason)).toEqual([null, null, null]);
  });

  it('fail-after=0 acts right after the headers: 200 and text/event-stream, then no event', async () => {
    const res = await chat('x #sim:midstream-end #sim:fail-after=0', { stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    expect(await sseData(res)).toEqual([]);
  });

  it('prefill sends the headers at once and the first event after the delay', async () => {
    // Headers sent only with the first event come after the whole delay; a delay this long leaves a
    // loaded box most of a second to bring headers sent at once.
    const started = Date.now();
    const res = await chat('x #sim:prefill=1000 #sim:tokens=1', { stream: true });
    const headersAfter = Date.now() - started;
    const data = await sseData(res);
    expect(headersAfter).toBeLessThan(900);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
    expect(data.at(-1)).toBe('[DONE]');
  });

  it('hang stops sending but keeps the connection open until the client leaves', async () => {
    const ac = new AbortController();
    const res = await post('/v1/chat/completions', { model: 'm', stream: true, messages: [{ role: 'user', content: '#sim:hang' }] }, {}, ac.signal);
    const reader = res.body!.getReader();
    expect(await readEvents(reader, 3)).toHaveLength(3);
    const more = await Promise.race([reader.read().then(() => 'data'), new Promise((r) => setTimeout(() => r('quiet'), 150))]);
    expect(more).toBe('quiet');
    expect(sim.stats.activeStreams).toBe(1);
    ac.abort();
    await until('the stream cancelled', () => sim.stats.cancelledStreams === 1);
    expect(sim.stats.cancellations[0]).toMatchObject({ contentTokensSent: 2, model: 'm', path: '/v1/chat/completions' });
  });
});

describe('cancellation, stats and config', () => {
  it('counts streams the client cancels and stops generating', async () => {
    const ac = new AbortController();
    const res = await post('/v1/chat/completions', { model: 'sim-core-1', stream: true, messages: [{ role: 'user', content: '#sim:tokens=1000 #sim:chunk-delay=20' }] }, {}, ac.signal);
    const reader = res.body!.getReader();
    await readEvents(reader, 4);
    ac.abort();
    await until('the stream cancelled', () => sim.stats.cancelledStreams === 1);
    const s = sim.stats.snapshot();
    expect(s.streams).toMatchObject({ started: 1, completed: 0, cancelled: 1, active: 0 });
    const sent = s.cancellations[0]?.contentTokensSent ?? -1;
    expect(sent).toBeGreaterThanOrEqual(3);
    expect(sent).toBeLessThan(20);
  });

  it('records requests by path with headers and body, and resets', async () => {
    await chat('recorded', {}, { authorization: 'Bearer abc', 'x-api-key': 'k1' });
    await fetch(`${base}/v1/models`);
    const res = await fetch(`${base}/_sim/stats`);
    const s = (await res.json()) as Json;
    expect(s.totalRequests).toBe(2);
    expect(s.requestsByPath).toEqual({ '/v1/chat/completions': 1, '/v1/models': 1 });
    expect(s.recent[0]).toMatchObject({ method: 'POST', path: '/v1/chat/completions', authorization: 'Bearer abc', xApiKey: 'k1' });
    expect(s.recent[0].headers['content-type']).toBe('application/json');
    expect(s.recent[0].body.messages[0].content).toBe('recorded');
    expect(s.authSeen).toEqual({ authorization: ['Bearer abc'], xApiKey: ['k1'] });
    expect(s.streams.completed).toBe(0);

    await fetch(`${base}/_sim/reset`, { method: 'POST' });
    expect(sim.stats.snapshot()).toMatchObject({ totalRequests: 0, recent: [], requestsByPath: {} });
  });

  it('keeps only the last 200 requests', async () => {
    for (let i = 0; i < 205; i++) await fetch(`${base}/v1/models?i=${i}`);
    const recent = sim.stats.requests();
    expect(recent).toHaveLength(200);
    expect(recent[0]?.seq).toBe(6);
    expect(sim.stats.totalRequests).toBe(205);
  });

  it('POST /_sim/config forces a status and latency for every request', async () => {
    const set = await post('/_sim/config', { forceStatus: 503, latencyMs: 30 });
    expect(((await set.json()) as Json).forceStatus).toBe(503);
    const started = Date.now();
    expect((await chat('x')).status).toBe(503);
    expect((await fetch(`${base}/v1/models`)).status).toBe(503);
    expect(Date.now() - started).toBeGreaterThanOrEqual(55);
    await post('/_sim/config', { forceStatus: null, latencyMs: 0 });
    expect((await chat('x')).status).toBe(200);
    expect((await post('/_sim/config', { forceStatus: 200 })).status).toBe(400);
  });
});

describe('api key', () => {
  it('enforces Authorization: Bearer <key> on /v1 only', async () => {
    const locked = createSimulator({ apiKey: 'sk-sim-secret' });
    const { port } = await locked.listen(0, '127.0.0.1');
    const url = `http://127.0.0.1:${port}`;
    try {
      const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }] });
      const missing = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      expect(missing.status).toBe(401);
      expect(((await missing.json()) as Json).error.type).toBe('invalid_request_error');
      const wrong = await fetch(`${url}/v1/models`, { headers: { authorization: 'Bearer sk-wrong-key-123' } });
      expect(wrong.status).toBe(401);
      expect(((await wrong.json()) as Json).error.code).toBe('invalid_api_key');
      const xKeyOnly = await fetch(`${url}/v1/models`, { headers: { 'x-api-key': 'sk-sim-secret' } });
      expect(xKeyOnly.status).toBe(401);
      const ok = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer sk-sim-secret' }, body });
      expect(ok.status).toBe(200);
      expect((await fetch(`${url}/_sim/stats`)).status).toBe(200);
      expect(locked.stats.snapshot().authSeen.authorization).toEqual(['Bearer sk-wrong-key-123', 'Bearer sk-sim-secret']);
    } finally {
      await locked.close();
    }
  });
});

describe('official openai client', () => {
  it('works for chat, streaming and embeddings', async () => {
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'sk-test', maxRetries: 0 });

    const completion = await client.chat.completions.create({ model: 'sim-core-1', messages: [{ role: 'user', content: 'hello' }], max_tokens: 8 });
    expect(completion.choices[0]?.message.content?.split(' ')).toHaveLength(8);
    expect(completion.choices[0]?.finish_reason).toBe('length');
    expect(completion.usage?.completion_tokens).toBe(8);

    const stream = await client.chat.completions.create({
      model: 'sim-core-1',
      messages: [{ role: 'user', content: 'hello' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    const whole = (await (await chat('hello')).json()) as Json;
    expect(text).toBe(whole.choices[0].message.content);
    expect(usage?.completion_tokens).toBe(16);

    const runner = client.chat.completions.stream({ model: 'sim-core-1', messages: [{ role: 'user', content: 'weather?' }], tools: [weatherTool as OpenAI.ChatCompletionTool], tool_choice: 'required' });
    const final = await runner.finalChatCompletion();
    const call = final.choices[0]?.message.tool_calls?.[0];
    expect(call?.type === 'function' && JSON.parse(call.function.arguments)).toHaveProperty('city');

    const emb = await client.embeddings.create({ model: 'sim-embed-1', input: ['one', 'two'] }); // base64 on the wire
    expect(emb.data).toHaveLength(2);
    expect(emb.data[0]?.embedding).toHaveLength(3584);
    const norm = Math.sqrt((emb.data[0]?.embedding ?? []).reduce((s, x) => s + x * x, 0));
    expect(norm).toBeCloseTo(1, 5);
    expect(sim.stats.lastRequest('/v1/embeddings')?.body).toMatchObject({ encoding_format: 'base64' });

    const err = await client.chat.completions.create({ model: 'sim-core-1', messages: [{ role: 'user', content: '#sim:status=429' }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
  });
});

describe('sliced streams', () => {
  /** The median size of the reads, bytes. */
  function medianBytes(pieces: string[]): number {
    const sizes = pieces.map((p) => Buffer.byteLength(p)).sort((a, b) => a - b);
    return sizes[Math.floor(sizes.length / 2)]!;
  }

  /** The body's network reads as the client saw them. */
  async function reads(res: Response): Promise<string[]> {
    const out: string[] = [];
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return out;
      out.push(dec.decode(value, { stream: true }));
    }
  }

  it('the same events as one write per event, cut into slices of 1 to slice-max bytes across event boundaries', async () => {
    const plain = await sseData(await chat('x #sim:tokens=12', { stream: true, stream_options: { include_usage: true } }));
    // Through the header, so the prompt (and its token count) stays the same.
    const pieces = await reads(
      await chat('x #sim:tokens=12', { stream: true, stream_options: { include_usage: true } }, { 'x-sim-directive': 'sliced,slice-max=40,slice-seed=7' }),
    );
    const whole = pieces.join('');
    const data = whole.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
    const strip = (d: string) => d.replace(/"id":"[^"]*","object":"chat\.completion\.chunk","created":\d+/, '');
    expect(data.map(strip)).toEqual(plain.map(strip));
    expect(data.at(-1)).toBe('[DONE]');
    expect(pieces.length).toBeGreaterThan(plain.length); // events of ~200 bytes in slices of at most 40
    // Slices the simulator wrote late are followed at once by those due meanwhile (slices.ts),
    // and TCP may join those in one read: most reads, not all, are single slices.
    expect(medianBytes(pieces)).toBeLessThanOrEqual(40);
    expect(pieces.some((p) => !p.endsWith('\n\n'))).toBe(true); // cut inside events
  });

  it('large slices carry several events in one piece; the sizes are fixed by the seed', async () => {
    const { sliceSizes } = await import('../../sidecar/simulator/slices.js');
    expect(sliceSizes({ seed: 3, maxBytes: 500, gapMs: 1 }, 5)).toEqual(sliceSizes({ seed: 3, maxBytes: 500, gapMs: 1 }, 5));
    expect(sliceSizes({ seed: 3, maxBytes: 500, gapMs: 1 }, 50).every((n) => n >= 1 && n <= 500)).toBe(true);
    const pieces = await reads(await chat('x #sim:tokens=20 #sim:slice-seed=3', { stream: true }));
    expect(pieces.some((p) => (p.match(/\n\n/g) ?? []).length >= 2)).toBe(true);
    expect(pieces.join('').endsWith('data: [DONE]\n\n')).toBe(true);
  });

  it('the simulator option slices every stream; a midstream failure still acts', async () => {
    const sliced = createSimulator({ slices: { sliced: true, sliceMaxBytes: 30 } });
    const { port } = await sliced.listen(0, '127.0.0.1');
    try {
      const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-core-1', stream: true, messages: [{ role: 'user', content: 'x #sim:midstream-error-event' }] }),
      });
      const pieces = await reads(res);
      expect(medianBytes(pieces)).toBeLessThanOrEqual(30);
      const data = pieces.join('').split('\n\n').filter((e) => e.startsWith('data: '));
      expect(data).toHaveLength(4);
      expect(JSON.parse(data[3]!.slice(6)).error.type).toBe('server_error');
    } finally {
      await sliced.close();
    }
  });
});
