/**
 * The fault suite's short mode (test/faults/suite.ts): the real stack, Redis
 * and the credit check on, mixed traffic, and in turn a sidecar SIGTERM, a
 * sidecar kill -9, a Redis stop and restart, a provider killed mid-stream,
 * Redis and the sidecar frozen (SIGSTOP) and resumed, slow readers and a
 * flood of unauthenticated bodies; after each, the stack serves again,
 * nothing stays held, every completed request is counted, the books
 * reconcile to the micro-unit and memory is back near its baseline.
 */
import { expect, it } from 'vitest';
import { SHORT, runFaultSuite } from '../faults/suite.js';

it('survives every fault with nothing lost (short mode)', async () => {
  const lines: string[] = [];
  const results = await runFaultSuite(SHORT, (l) => lines.push(l));
  expect(results.length).toBeGreaterThanOrEqual(8);
  expect(results.filter((r) => !r.passed).map((r) => r.line), lines.join('\n')).toEqual([]);
  expect(lines.at(-1)).toBe(`${results.length} passed, 0 failed`);
}, 600_000);
