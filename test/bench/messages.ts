/**
 * gRPC messages per request between Envoy and its sidecar, per scenario, from
 * the Envoy's own counters (admin /stats) before and after a few sequential
 * requests. Names as Envoy 1.40 exposes them; every ext_authz / ext_proc
 * filter of the listener adds to the same `http.<prefix>.ext_authz.*` /
 * `http.<prefix>.ext_proc.*` counters (or to its own under a filter
 * stat_prefix); all are summed:
 *
 *   http.<p>.ext_authz.{ok,denied,error,failure_mode_allowed}   one per Check call (key check and full check)
 *   http.<p>.ext_proc.streams_started                           ext_proc gRPC streams
 *   http.<p>.ext_proc.stream_msgs_sent                          ProcessingRequests Envoy sent
 *   http.<p>.ext_proc.stream_msgs_received                      ProcessingResponses it got back
 *   cluster.sidecar.upstream_rq_total                           gRPC calls to the sidecar (Check calls + ext_proc streams)
 *
 * Deterministic where the wall-clock numbers are not; a streamed response's
 * body messages follow the provider's network writes (and Envoy's reads).
 */
import { SequentialClient, StreamClient } from './latency.js';
import { fmt, table } from './report.js';
import type { Scenario } from './scenarios.js';
import type { Targets } from './targets.js';

export interface MessageDelta {
  readonly authz: number;
  readonly extProcStreams: number;
  readonly extProcSent: number;
  readonly extProcReceived: number;
  readonly grpcCalls: number;
}

export interface MessageCounts {
  readonly scenario: string;
  readonly label: string;
  readonly requests: number;
  /** `data:` events per response the client receives (streams), else 0. */
  readonly eventsPerResp: number;
  /** Totals over the requests (divide by `requests`). */
  readonly counts: MessageDelta;
  /** Probe requests that failed (non-2xx, error, incomplete stream); the counts include them. */
  readonly failures: number;
}

const AUTHZ = /^http\.[^.]+\.ext_authz\.(?:.+\.)?(?:ok|denied|error|failure_mode_allowed)$/;
const PROC = /^http\.[^.]+\.ext_proc\.(?:.+\.)?(streams_started|stream_msgs_sent|stream_msgs_received)$/;
const GRPC = /^cluster\.sidecar\.upstream_rq_total$/;

/** The counters this module reads, from one Envoy's admin endpoint. */
export async function readCounters(adminUrl: string): Promise<Map<string, number>> {
  const res = await fetch(`${adminUrl}/stats?filter=${encodeURIComponent('ext_authz|ext_proc|cluster\\.sidecar\\.upstream_rq_total')}`);
  if (!res.ok) throw new Error(`envoy admin /stats: HTTP ${res.status}`);
  const out = new Map<string, number>();
  for (const line of (await res.text()).split('\n')) {
    const i = line.lastIndexOf(': ');
    if (i < 0) continue;
    const v = Number(line.slice(i + 2));
    if (Number.isFinite(v)) out.set(line.slice(0, i), v);
  }
  return out;
}

/** What happened between two readCounters snapshots. */
export function messageDelta(before: ReadonlyMap<string, number>, after: ReadonlyMap<string, number>): MessageDelta {
  const c = { authz: 0, extProcStreams: 0, extProcSent: 0, extProcReceived: 0, grpcCalls: 0 };
  for (const [k, v] of after) {
    const d = v - (before.get(k) ?? 0);
    if (AUTHZ.test(k)) c.authz += d;
    else if (GRPC.test(k)) c.grpcCalls += d;
    else {
      const m = PROC.exec(k);
      if (m?.[1] === 'streams_started') c.extProcStreams += d;
      else if (m?.[1] === 'stream_msgs_sent') c.extProcSent += d;
      else if (m?.[1] === 'stream_msgs_received') c.extProcReceived += d;
    }
  }
  return c;
}

/** Counts for one scenario; null when its target has no sidecar (bare Envoy, the simulator). */
export async function messageProbe(t: Targets, s: Scenario, requests: number): Promise<MessageCounts | null> {
  const spec = s.request(t);
  const admin = t.envoyAdminFor(spec.url);
  if (!admin) return null;
  const before = await readCounters(admin);
  let failures: number;
  if (s.kind === 'unary') {
    const client = new SequentialClient(spec);
    const sample = await client.run(requests).finally(() => client.close());
    failures = sample.non2xx + sample.errors;
  } else {
    const client = new StreamClient(spec, s.checkEach);
    const sample = await client.run(requests).finally(() => client.close());
    failures = sample.non2xx + sample.errors + sample.bad;
  }
  // The last ext_proc answer and Envoy's counters are not in step with the client's last byte.
  await new Promise((res) => setTimeout(res, 100));
  const counts = messageDelta(before, await readCounters(admin));
  return { scenario: s.name, label: s.label, requests, eventsPerResp: s.kind === 'stream' ? s.expectedEvents : 0, counts, failures };
}

export function messagesTable(rows: readonly MessageCounts[]): string {
  const per = (v: number, r: MessageCounts) => fmt(v / r.requests, 2);
  return table(
    ['target', 'n', 'ext_authz calls/req', 'ext_proc streams/req', 'ext_proc msgs sent/req', 'received/req', 'sidecar msgs/req', 'gRPC calls/req', 'ext_proc msgs/event'],
    rows.map((r) => [
      r.label,
      String(r.requests),
      per(r.counts.authz, r),
      per(r.counts.extProcStreams, r),
      per(r.counts.extProcSent, r),
      per(r.counts.extProcReceived, r),
      per(r.counts.authz + r.counts.extProcSent, r),
      per(r.counts.grpcCalls, r),
      r.eventsPerResp > 0 ? fmt(r.counts.extProcSent / r.requests / r.eventsPerResp, 3) : '-',
    ]),
  );
}

/** BENCH_JSON shape, per scenario (ext_authz and ext_proc keep the names of the first version of this table). */
export function messagesJson(rows: readonly MessageCounts[]): Record<string, unknown> {
  const r3 = (v: number) => Number(v.toFixed(3));
  return Object.fromEntries(
    rows.map((m) => [
      m.scenario,
      {
        ext_authz: r3(m.counts.authz / m.requests),
        ext_proc: r3(m.counts.extProcSent / m.requests),
        ext_proc_received: r3(m.counts.extProcReceived / m.requests),
        ext_proc_streams: r3(m.counts.extProcStreams / m.requests),
        grpc_calls: r3(m.counts.grpcCalls / m.requests),
        ext_proc_per_event: m.eventsPerResp > 0 ? Number((m.counts.extProcSent / m.requests / m.eventsPerResp).toFixed(4)) : null,
      },
    ]),
  );
}
