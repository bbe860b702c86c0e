/**
 * Load before anything is measured. V8 compiles a function with its optimizing
 * compiler (TurboFan) only after a few thousand calls' worth of work (Node 22:
 * `--invocation-count-for-turbofan=3000`, Maglev off); until then the function
 * runs in the baseline tier (Sparkplug), which calls a builtin for every
 * property access and call. A sidecar answering one request at a time runs its
 * request path that way for its first ~4,000 to 6,000 requests, spending up to
 * twice the CPU per JSON chat (a p50 0.5 to 1.3 ms longer at one connection on
 * the 2-core box: `warm-up-curve.ts`, docs/benchmark.md, session 21). A gateway
 * in service has long passed that point, so every target of a measurement first
 * gets the same load (bare Envoy and the floor too) and what is measured is
 * that steady state.
 */
import autocannon from 'autocannon';
import type { RequestSpec } from './latency.js';
import { streamLoad } from './stream-load.js';

/** Seconds of load per target before measuring (5 s at 16 connections: several thousand requests on a gateway). */
export const LOAD_WARMUP_SECONDS = 5;

export type StreamCheck = (status: number, body: string, events: number) => string | null;

/** autocannon's options for requests like `spec` from `connections` clients (one body for every request). */
export function autocannonOptions(spec: RequestSpec, connections: number): autocannon.Options {
  if (spec.bodyOf) throw new Error('autocannon sends one body: a request with bodyOf is not supported');
  return { url: spec.url, method: spec.method as 'POST', headers: { ...spec.headers }, body: spec.body, connections };
}

/**
 * `seconds` of requests like `spec` from `connections` clients at once; a
 * streamed request (with its check) is read to its end. Returns how many
 * requests were answered well. Throws when an answer was not a 2xx (or a
 * stream failed its check), or none came: a warm-up of the error path would
 * leave the measured path cold. (A request cut off in flight when the time
 * is up does not count.)
 */
export async function warmUnderLoad(spec: RequestSpec, connections: number, seconds: number, streamCheck?: StreamCheck): Promise<number> {
  if (seconds <= 0) return 0;
  let ok: number;
  let failed: number;
  let problem: string | undefined;
  if (streamCheck) {
    const { sample } = await streamLoad(spec, streamCheck, connections, seconds);
    ok = sample.doneMs.length;
    failed = sample.non2xx + sample.bad;
    problem = sample.firstProblem ?? undefined;
  } else {
    const result = await autocannon({ ...autocannonOptions(spec, connections), duration: seconds });
    ok = result['2xx'];
    failed = result.non2xx;
  }
  if (failed > 0 || ok === 0) throw new Error(`warm-up of ${spec.url}: ${ok} answered, ${failed} failed${problem ? ` (${problem})` : ''}`);
  return ok;
}
