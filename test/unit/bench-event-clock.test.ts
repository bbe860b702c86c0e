import { describe, expect, it } from 'vitest';
import { EventClock, countDataEvents } from '../../test/bench/latency.js';
import { messageDelta } from '../../test/bench/messages.js';

const EVENT = 'data: {"object":"chat.completion.chunk","choices":[{"delta":{"content":"héllo"}}]}\n\n';

/** Feeds `pieces` to a clock, read i at time i + 1; returns the times of the first event and of [DONE] (0 = never). */
function clockOf(pieces: string[]): { first: number; done: number } {
  const c = new EventClock();
  pieces.forEach((p, i) => c.read(Buffer.from(p, 'utf8'), BigInt(i + 1)));
  return { first: Number(c.firstEvent), done: Number(c.done) };
}

describe('bench: first complete event and [DONE]', () => {
  it('the first event counts when its blank line arrives, not at the first byte', () => {
    expect(clockOf([EVENT.slice(0, 10), EVENT.slice(10, -1), EVENT.slice(-1), 'data: [DONE]\n\n'])).toEqual({ first: 3, done: 4 });
  });

  it('a multi-byte character cut between two reads still parses', () => {
    const bytes = Buffer.from(EVENT, 'utf8');
    const cut = bytes.indexOf(0xc3) + 1; // inside é
    const c = new EventClock();
    c.read(bytes.subarray(0, cut), 1n);
    c.read(bytes.subarray(cut), 2n);
    expect(c.firstEvent).toBe(2n);
  });

  it('comments, a data line that is not JSON yet and [DONE] do not count as the first event', () => {
    expect(clockOf([': keep-alive\n\n', 'data: {"cut\n\n', 'data: [DONE]\n\n'])).toEqual({ first: 0, done: 3 });
  });

  it('several events and [DONE] in one read; [DONE] split across reads', () => {
    expect(clockOf([EVENT + EVENT + 'data: [DO', 'NE]\n', '\n'])).toEqual({ first: 1, done: 3 });
    expect(countDataEvents(EVENT + EVENT + 'data: [DONE]\n\n')).toBe(3);
  });
});

describe('bench: messages per request from Envoy counters', () => {
  it('sums every ext_authz and ext_proc filter, leaves the cluster-level ext_authz copy out', () => {
    const before = new Map([
      ['http.gateway.ext_authz.ok', 10],
      ['http.gateway.ext_proc.stream_msgs_sent', 30],
    ]);
    const after = new Map([
      ['http.gateway.ext_authz.ok', 14],
      ['http.gateway.ext_authz.denied', 1],
      ['cluster.provider.ext_authz.ok', 5],
      ['http.gateway.ext_proc.streams_started', 2],
      ['http.gateway.ext_proc.stream_msgs_sent', 37],
      ['http.gateway.ext_proc.json.stream_msgs_received', 6],
      ['cluster.sidecar.upstream_rq_total', 7],
    ]);
    expect(messageDelta(before, after)).toEqual({ authz: 5, extProcStreams: 2, extProcSent: 7, extProcReceived: 6, grpcCalls: 7 });
  });
});
