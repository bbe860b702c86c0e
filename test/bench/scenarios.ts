/**
 * The scenario table. Each row is one thing measured: a target and the
 * request sent to it. To add a scenario, add a row here; if it needs a
 * different gateway (e.g. one started with the credit check on), add that
 * variant to GATEWAY_VARIANTS in targets.ts and name it in `gateway`.
 *
 * `kind` decides how a row is measured:
 *   unary   sequential latency (send -> last byte) + autocannon throughput;
 *   stream  sequential streaming client: time to first body byte, to the first
 *           complete event, to `data: [DONE]`, time per chunk, CPU per response
 *           and per event; the rows of the `stream` loop also get a streams/s
 *           run at BENCH_CONNECTIONS (stream-load.ts).
 */
import type { RequestSpec } from './latency.js';
import type { GatewayVariant, Targets } from './targets.js';

interface ScenarioBase {
  /** Short id, used in BENCH_JSON and BENCH_SCENARIOS. */
  readonly name: string;
  /** Human label for the tables. */
  readonly label: string;
  /** The full gateway this row needs started (default: none beyond the main one). */
  readonly gateway?: GatewayVariant;
  readonly request: (t: Targets) => RequestSpec;
  /** Checks one successful response body before measuring (smoke request); returns a problem or null. */
  readonly check: (status: number, body: string) => string | null;
}

export interface UnaryScenario extends ScenarioBase {
  readonly kind: 'unary';
}

export interface StreamScenario extends ScenarioBase {
  readonly kind: 'stream';
  /** Which request-count knob applies: BENCH_STREAM_REQUESTS, BENCH_STREAM_PACED_REQUESTS or BENCH_STREAM_SLICED_REQUESTS. */
  readonly loop: StreamLoop;
  /** `#sim:tokens` and `#sim:chunk-delay` of the request. */
  readonly tokens: number;
  readonly chunkDelayMs: number;
  /** `#sim:sliced`: the provider writes the stream in 1 to 500-byte slices 1 ms apart. */
  readonly sliced: boolean;
  /** Which target this row measures, for the summary (bare Envoy, the floor, a gateway). */
  readonly target: 'bare' | 'floor' | 'gateway';
  /** `data:` events a complete response has (role, content x tokens, finish, usage, [DONE]). */
  readonly expectedEvents: number;
  /** Cheap per-response check for the measured loop (after the timing). */
  readonly checkEach: (status: number, body: string, events: number) => string | null;
}

export type Scenario = UnaryScenario | StreamScenario;

export type StreamLoop = 'stream' | 'paced' | 'sliced';

export const USER_MESSAGE = 'Say hello in one short sentence.';

const SENTENCE = 'Grüezi! The quick brown fox jumps over the lazy dog near the Zürich lake. ';

/** `turns` earlier messages of about 600 characters each, user and assistant in turn (a conversation's history). */
export function history(turns: number): Array<{ role: string; content: string }> {
  return Array.from({ length: turns }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: SENTENCE.repeat(8) }));
}

/** A chat of one short question, after `turns` messages of history (0: none, the bench's chat). */
export function chatBody(model: string, turns = 0): string {
  return JSON.stringify({ model, messages: [...history(turns), { role: 'user', content: USER_MESSAGE }] });
}

/** A non-streaming chat completion reply with `model` set to the expected name. */
function chatCompletion(expectedModel: string) {
  return (status: number, body: string): string | null => {
    if (status !== 200) return `HTTP ${status}: ${body.slice(0, 300)}`;
    let json: any;
    try {
      json = JSON.parse(body);
    } catch {
      return `not JSON: ${body.slice(0, 200)}`;
    }
    if (json?.object !== 'chat.completion') return `object is ${JSON.stringify(json?.object)}, not chat.completion`;
    if (json.model !== expectedModel) return `model is ${JSON.stringify(json.model)}, expected ${expectedModel}`;
    if (typeof json.choices?.[0]?.message?.content !== 'string') return 'no choices[0].message.content';
    return null;
  };
}

/**
 * The user message of a streamed request: the simulator directives shape the stream.
 * A slice seed (sliced streams) fixes how the provider cuts it: the same seed, the same slices.
 */
export function streamMessage(tokens: number, chunkDelayMs: number, sliced = false, sliceSeed?: number): string {
  const slicing = sliced ? (sliceSeed === undefined ? ' #sim:sliced' : ` #sim:sliced #sim:slice-seed=${sliceSeed}`) : '';
  return `${USER_MESSAGE} #sim:tokens=${tokens} #sim:chunk-delay=${chunkDelayMs}${slicing}`;
}

/** Streamed chat; include_usage in every case, so bare Envoy and the gateway answer the same events. */
export function streamBody(model: string, tokens: number, chunkDelayMs: number, sliced = false, sliceSeed?: number): string {
  return JSON.stringify({
    model,
    stream: true,
    stream_options: { include_usage: true },
    messages: [{ role: 'user', content: streamMessage(tokens, chunkDelayMs, sliced, sliceSeed) }],
  });
}

/** A complete streamed reply: the expected event count, every chunk for `expectedModel`, a usage chunk, [DONE] last. */
function chatStream(expectedModel: string, expectedEvents: number) {
  return (status: number, body: string): string | null => {
    if (status !== 200) return `HTTP ${status}: ${body.slice(0, 300)}`;
    const events = body
      .split('\n\n')
      .map((e) => e.trim())
      .filter(Boolean);
    const data: string[] = [];
    for (const e of events) {
      for (const line of e.split('\n')) if (line.startsWith('data:')) data.push(line.slice(5).trim());
    }
    if (data.length !== expectedEvents) return `${data.length} data events, expected ${expectedEvents}: ${body.slice(0, 300)}`;
    if (data[data.length - 1] !== '[DONE]') return `last event is ${JSON.stringify(data[data.length - 1]?.slice(0, 100))}, not [DONE]`;
    let usage = false;
    for (const d of data.slice(0, -1)) {
      let json: any;
      try {
        json = JSON.parse(d);
      } catch {
        return `event not JSON: ${d.slice(0, 200)}`;
      }
      if (json?.object !== 'chat.completion.chunk') return `event object is ${JSON.stringify(json?.object)}, not chat.completion.chunk`;
      if (json.model !== expectedModel) return `event model is ${JSON.stringify(json.model)}, expected ${expectedModel}`;
      if (json.usage && typeof json.usage.total_tokens === 'number') usage = true;
    }
    if (!usage) return 'no usage chunk although stream_options.include_usage was asked';
    return null;
  };
}

/** Per measured response: event count and the closing [DONE] (the full check ran on the smoke request). */
function streamComplete(expectedEvents: number) {
  return (_status: number, body: string, events: number): string | null => {
    if (events !== expectedEvents) return `${events} data events, expected ${expectedEvents}: ...${body.slice(-200)}`;
    if (!body.trimEnd().endsWith('data: [DONE]')) return `stream did not end with data: [DONE]: ...${body.slice(-200)}`;
    return null;
  };
}

const INTERNAL_MODEL = 'sim-core-1';
const ALIAS = 'svc-core';

const providerRequest = (base: string, t: Targets, body = chatBody(INTERNAL_MODEL)): RequestSpec => ({
  url: `${base}/v1/chat/completions`,
  method: 'POST',
  headers: { 'content-type': 'application/json', authorization: `Bearer ${t.upstreamKey}` },
  body,
});

const gatewayRequest = (base: string, key: string, body = chatBody(ALIAS)): RequestSpec => ({
  url: `${base}/chat/completions`,
  method: 'POST',
  headers: { 'content-type': 'application/json', 'x-api-key': key },
  body,
});

/** Content chunks of the streaming rows (`#sim:tokens`). */
export const STREAM_TOKENS = 32;
/** Paced rows: fewer chunks, each `PACED_DELAY_MS` apart, so every event crosses the gateway on its own. */
export const PACED_TOKENS = 16;
export const PACED_DELAY_MS = 5;

/** role + content x tokens + finish + usage + [DONE] */
const eventsFor = (tokens: number) => tokens + 4;

/** Sliced rows: the provider writes 1 to 500-byte slices 1 ms apart (`#sim:sliced`), chunks generated 0 ms apart. */
export const SLICED_TOKENS = 32;

/** How a loop's streams are shaped, for labels. */
export function loopShape(loop: StreamLoop, tokens: number, delay: number): string {
  return loop === 'sliced' ? `stream ${tokens}, sliced` : `stream ${tokens} x ${delay} ms`;
}

function streamRows(loop: StreamLoop, tokens: number, delay: number): StreamScenario[] {
  const suffix = loop === 'stream' ? '' : `_${loop}`;
  const sliced = loop === 'sliced';
  const shape = loopShape(loop, tokens, delay);
  const common = { kind: 'stream' as const, loop, tokens, chunkDelayMs: delay, sliced, expectedEvents: eventsFor(tokens), checkEach: streamComplete(eventsFor(tokens)) };
  /**
   * A row's request for `model`. Sliced rows give every request its own slice seed in
   * order (1, 2, 3, ... per client, warm-up included): each target's k-th stream is cut
   * exactly like every other target's, so the rows compare the same slicings. (Without
   * seeds each simulator hands out the next of its own sequence, and the variant
   * gateways have a simulator of their own: the rows compared different cuts, whose
   * lengths alone moved a p50 by a millisecond.)
   */
  const spec = (make: (body: string) => RequestSpec, model: string): RequestSpec => {
    const base = make(streamBody(model, tokens, delay, sliced));
    return sliced ? { ...base, bodyOf: (n) => streamBody(model, tokens, delay, true, n + 1) } : base;
  };
  return [
    {
      ...common,
      target: 'bare',
      name: `bare_stream${suffix}`,
      label: `(b) envoy, router only, ${shape}`,
      request: (t) => spec((body) => providerRequest(t.bareUrl, t, body), INTERNAL_MODEL),
      check: chatStream(INTERNAL_MODEL, eventsFor(tokens)),
    },
    {
      ...common,
      target: 'floor',
      name: `floor_stream${suffix}`,
      label: `(f) floor, no-op sidecar, ${shape}`,
      request: (t) => spec((body) => providerRequest(t.floorUrl, t, body), INTERNAL_MODEL),
      check: chatStream(INTERNAL_MODEL, eventsFor(tokens)),
    },
    {
      ...common,
      target: 'gateway',
      name: `gateway_stream${suffix}`,
      label: `(c) full gateway, ${shape}`,
      request: (t) => spec((body) => gatewayRequest(t.gatewayBase, t.gatewayKey, body), ALIAS),
      check: chatStream(ALIAS, eventsFor(tokens)),
    },
    {
      ...common,
      target: 'gateway',
      gateway: 'credit',
      name: `credit_stream${suffix}`,
      label: `(d) gateway, redis, credit on, ${shape}`,
      request: (t) => spec((body) => gatewayRequest(t.variant('credit').base, t.variant('credit').key, body), ALIAS),
      check: chatStream(ALIAS, eventsFor(tokens)),
    },
  ];
}

export const SCENARIOS: readonly Scenario[] = [
  {
    name: 'direct',
    label: '(a) simulator direct',
    kind: 'unary',
    request: (t) => providerRequest(t.simulatorUrl, t),
    check: chatCompletion(INTERNAL_MODEL),
  },
  {
    name: 'bare',
    label: '(b) envoy, router only',
    kind: 'unary',
    // No filters: no alias rewrite, no auth; the client speaks the provider's language.
    request: (t) => providerRequest(t.bareUrl, t),
    check: chatCompletion(INTERNAL_MODEL),
  },
  {
    name: 'floor',
    label: '(f) floor, no-op sidecar',
    kind: 'unary',
    // The gateway's Envoy config and filters, handlers that do nothing (null-sidecar.ts).
    request: (t) => providerRequest(t.floorUrl, t),
    check: chatCompletion(INTERNAL_MODEL),
  },
  {
    name: 'gateway',
    label: '(c) full gateway',
    kind: 'unary',
    request: (t) => gatewayRequest(t.gatewayBase, t.gatewayKey),
    check: chatCompletion(ALIAS),
  },
  {
    name: 'gateway_redis',
    label: "(c') gateway, redis, credit off",
    kind: 'unary',
    gateway: 'redis',
    request: (t) => gatewayRequest(t.variant('redis').base, t.variant('redis').key),
    check: chatCompletion(ALIAS),
  },
  {
    name: 'gateway_credit',
    label: '(d) gateway, redis, credit on',
    kind: 'unary',
    gateway: 'credit',
    request: (t) => gatewayRequest(t.variant('credit').base, t.variant('credit').key),
    check: chatCompletion(ALIAS),
  },
  ...streamRows('stream', STREAM_TOKENS, 0),
  ...streamRows('paced', PACED_TOKENS, PACED_DELAY_MS),
  ...streamRows('sliced', SLICED_TOKENS, 0),
];

/** Comparisons of unary rows printed after the tables: numerator / denominator scenario names. */
export const COMPARISONS: ReadonlyArray<{ readonly name: string; readonly num: string; readonly den: string; readonly what: string }> = [
  { name: 'gateway_vs_bare', num: 'gateway', den: 'bare', what: 'full gateway vs bare Envoy (c)/(b)' },
  { name: 'credit_vs_bare', num: 'gateway_credit', den: 'bare', what: 'gateway on the redis store, credit check on (the issue 11 setting) vs bare Envoy (d)/(b)' },
  { name: 'floor_vs_bare', num: 'floor', den: 'bare', what: 'architecture floor (gateway Envoy config, no-op sidecar) vs bare Envoy (f)/(b)' },
  { name: 'gateway_vs_floor', num: 'gateway', den: 'floor', what: "full gateway vs the floor: the gateway's own code (c)/(f)" },
  { name: 'bare_vs_direct', num: 'bare', den: 'direct', what: 'bare Envoy vs simulator direct (b)/(a)' },
  { name: 'credit_on_vs_off', num: 'gateway_credit', den: 'gateway_redis', what: "credit check on vs off, both on the redis store (d)/(c')" },
  { name: 'redis_vs_memory', num: 'gateway_redis', den: 'gateway', what: "gateway on the redis store vs the memory store, credit check off (c')/(c)" },
];

/** Comparisons of streaming rows, per loop: gateway minus bare Envoy, the floor minus bare Envoy, gateway minus the floor. */
export const STREAM_COMPARISONS: ReadonlyArray<{ readonly name: string; readonly num: string; readonly den: string; readonly what: string }> = (
  [
    ['stream', STREAM_TOKENS, 0],
    ['paced', PACED_TOKENS, PACED_DELAY_MS],
    ['sliced', SLICED_TOKENS, 0],
  ] as const
).flatMap(([loop, tokens, delay]) => {
  const suffix = loop === 'stream' ? '' : `_${loop}`;
  const shape = loop === 'sliced' ? `${tokens} chunks, provider writes 1-500 byte slices 1 ms apart` : `${tokens} chunks, ${delay} ms apart`;
  return [
    { name: `stream${suffix}_gateway_vs_bare`, num: `gateway_stream${suffix}`, den: `bare_stream${suffix}`, what: `streaming, ${shape}: full gateway vs bare Envoy (c)-(b)` },
    { name: `stream${suffix}_credit_vs_bare`, num: `credit_stream${suffix}`, den: `bare_stream${suffix}`, what: `streaming, ${shape}: gateway, redis, credit on vs bare Envoy (d)-(b)` },
    { name: `stream${suffix}_floor_vs_bare`, num: `floor_stream${suffix}`, den: `bare_stream${suffix}`, what: `streaming, ${shape}: architecture floor vs bare Envoy (f)-(b)` },
    { name: `stream${suffix}_gateway_vs_floor`, num: `gateway_stream${suffix}`, den: `floor_stream${suffix}`, what: `streaming, ${shape}: full gateway vs the floor (c)-(f)` },
  ];
});
