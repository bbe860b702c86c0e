/**
 * The scenario table. Each row is one thing measured: a target and the
 * request sent to it. To add a scenario (streaming, credit check on, ...),
 * add a row here; if it needs a different target (e.g. a gateway started with
 * billing enabled), add that target to targets.ts and reference it from the
 * request builder. `kind` is there so a streaming scenario can be measured
 * differently (time to first byte) without touching the unary ones.
 */
import type { RequestSpec } from './latency.js';
import type { Targets } from './targets.js';

export interface Scenario {
  /** Short id, used in BENCH_JSON and BENCH_SCENARIOS. */
  readonly name: string;
  /** Human label for the tables. */
  readonly label: string;
  readonly kind: 'unary';
  readonly request: (t: Targets) => RequestSpec;
  /** Checks one successful response body before measuring; returns a problem or null. */
  readonly check: (status: number, body: string) => string | null;
}

export const USER_MESSAGE = 'Say hello in one short sentence.';

export function chatBody(model: string): string {
  return JSON.stringify({ model, messages: [{ role: 'user', content: USER_MESSAGE }] });
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

const INTERNAL_MODEL = 'sim-core-1';
const ALIAS = 'svc-core';

const providerRequest = (base: string, t: Targets): RequestSpec => ({
  url: `${base}/v1/chat/completions`,
  method: 'POST',
  headers: { 'content-type': 'application/json', authorization: `Bearer ${t.upstreamKey}` },
  body: chatBody(INTERNAL_MODEL),
});

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
    name: 'gateway',
    label: '(c) full gateway',
    kind: 'unary',
    request: (t) => ({
      url: `${t.gatewayBase}/chat/completions`,
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': t.gatewayKey },
      body: chatBody(ALIAS),
    }),
    check: chatCompletion(ALIAS),
  },
];

/** Comparisons printed after the tables: numerator / denominator scenario names. */
export const COMPARISONS: ReadonlyArray<{ readonly name: string; readonly num: string; readonly den: string; readonly what: string }> = [
  { name: 'gateway_vs_bare', num: 'gateway', den: 'bare', what: 'full gateway vs bare Envoy (c)/(b)' },
  { name: 'bare_vs_direct', num: 'bare', den: 'direct', what: 'bare Envoy vs simulator direct (b)/(a)' },
];
