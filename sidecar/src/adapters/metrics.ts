import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { ExchangeSummary } from '../domain/exchange.js';

/**
 * The sidecar's Prometheus metrics (served on the operator port, /metrics).
 *
 * Labels are bounded sets only: route, alias (catalogue aliases, never what a
 * caller typed), HTTP status, error code (the catalogue's), phase, result.
 * No tenant id, key id or credential is ever a label or a value.
 *
 * The hot path stays cheap: label children are looked up in nested maps
 * (created once per label combination, then reused), phase histograms are
 * created up front, and nothing here allocates per request beyond that.
 */

export const METRIC_PREFIX = 'gateway_';

/** Latency buckets (seconds): sub-millisecond authorization up to multi-minute streams. */
const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const STORE_BUCKETS = [0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];

export type Phase = 'authorization' | 'request' | 'first_event' | 'response' | 'end_to_end';
export type StoreName = 'keys' | 'ledger';
export type SettlementResult = 'applied' | 'journaled' | 'retried' | 'failed';
export type ErrorSite = 'authorization' | 'ext_proc' | 'settlement';

/** A cache of label children keyed by label values, one nested map level per label. */
class Children<C> {
  private readonly root = new Map<string, unknown>();
  constructor(private readonly make: (values: string[]) => C) {}

  get(...values: string[]): C {
    let node = this.root;
    for (let i = 0; i < values.length - 1; i++) {
      const v = values[i] as string;
      let next = node.get(v) as Map<string, unknown> | undefined;
      if (!next) node.set(v, (next = new Map()));
      node = next;
    }
    const last = values[values.length - 1] as string;
    let child = node.get(last) as C | undefined;
    if (child === undefined) {
      child = this.make(values);
      node.set(last, child);
    }
    return child;
  }
}

type CounterChild = ReturnType<Counter['labels']>;
type HistogramChild = ReturnType<Histogram['labels']>;
type GaugeChild = ReturnType<Gauge['labels']>;

export interface BuildInfo {
  readonly version: string;
  readonly commit: string;
}

/** Paths the sidecar sees, as route label values (bounded). */
export function routeLabel(path: string, apiPrefix: string): string {
  const rest = path.startsWith(`${apiPrefix}/`) ? path.slice(apiPrefix.length + 1) : null;
  if (rest === null) return 'outside_api';
  const q = rest.indexOf('?');
  const first = (q < 0 ? rest : rest.slice(0, q)).split('/', 1)[0] ?? '';
  switch (first) {
    case 'chat':
      return rest.startsWith('chat/completions') ? 'chat' : 'unknown';
    case 'embeddings':
    case 'models':
    case 'whoami':
    case 'usage':
    case 'credits':
    case 'accounts':
      return first;
    default:
      return 'unknown';
  }
}

export class GatewayMetrics {
  readonly registry = new Registry();
  private readonly requests: Children<CounterChild>;
  private readonly tokens: Children<CounterChild>;
  private readonly phases = new Map<Phase, HistogramChild>();
  private readonly holdsOpen: Gauge;
  private readonly heldAmount: Gauge;
  private readonly settlements: Children<CounterChild>;
  private readonly journalPending: Gauge;
  private readonly storeOps: Children<HistogramChild>;
  private readonly storeErrors: Children<CounterChild>;
  private readonly storeUp: Children<GaugeChild>;
  private readonly streamsAborted: Children<CounterChild>;
  private readonly idpRefreshes: Children<CounterChild>;
  private readonly errors: Children<CounterChild>;
  private readonly reloads: Children<CounterChild>;
  private readonly configGeneration: Gauge;

  constructor(build: BuildInfo, opts: { processMetrics?: boolean } = {}) {
    const registers = [this.registry];
    const p = METRIC_PREFIX;
    const requests = new Counter({
      name: `${p}requests_total`,
      help: 'Requests seen by the sidecar, by route, alias, HTTP status and error code ("" when none)',
      labelNames: ['route', 'alias', 'status', 'code'],
      registers,
    });
    this.requests = new Children((v) => requests.labels(...v));
    const phase = new Histogram({
      name: `${p}phase_duration_seconds`,
      help: 'Latency per phase: authorization (ext_authz check in the sidecar), request (until the provider answered with headers), first_event (until the first streamed event reached the caller), response (provider headers to the end of the response), end_to_end (ext_proc start to the end of the response)',
      labelNames: ['phase'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    for (const ph of ['authorization', 'request', 'first_event', 'response', 'end_to_end'] as const) this.phases.set(ph, phase.labels(ph));
    const tokens = new Counter({
      name: `${p}tokens_total`,
      help: 'Tokens by alias and direction (in: prompt, out: completion, reasoning included)',
      labelNames: ['alias', 'direction'],
      registers,
    });
    this.tokens = new Children((v) => tokens.labels(...v));
    this.holdsOpen = new Gauge({ name: `${p}credit_holds_open`, help: 'Credit holds this instance placed that are not settled or released yet', registers });
    this.heldAmount = new Gauge({ name: `${p}credit_held_micro`, help: 'Micro-units held by the open holds of this instance', registers });
    const settlements = new Counter({
      name: `${p}settlements_total`,
      help: 'Settlements and releases: applied at once, journaled (store unreachable), retried from the journal and applied, failed (never applicable; hold released)',
      labelNames: ['op', 'result'],
      registers,
    });
    this.settlements = new Children((v) => settlements.labels(...v));
    for (const op of ['settle', 'release'] as const) for (const r of ['applied', 'journaled', 'retried', 'failed'] as const) this.settlements.get(op, r).inc(0);
    this.journalPending = new Gauge({ name: `${p}settlement_journal_pending`, help: 'Operations waiting in the local settlement journal', registers });
    const storeOps = new Histogram({
      name: `${p}store_operation_duration_seconds`,
      help: 'Store (keys) and ledger operations, by store and result (ok, error)',
      labelNames: ['store', 'result'],
      buckets: STORE_BUCKETS,
      registers,
    });
    this.storeOps = new Children((v) => storeOps.labels(...v));
    const storeErrors = new Counter({
      name: `${p}store_errors_total`,
      help: 'Store operations that failed because the store could not be reached',
      labelNames: ['store'],
      registers,
    });
    this.storeErrors = new Children((v) => storeErrors.labels(...v));
    const storeUp = new Gauge({ name: `${p}store_up`, help: '1 when the last periodic ping of the store succeeded', labelNames: ['store'], registers });
    this.storeUp = new Children((v) => storeUp.labels(...v));
    for (const s of ['keys', 'ledger'] as const) {
      this.storeErrors.get(s).inc(0);
      this.storeUp.get(s);
    }
    this.streamsAborted = this.oneLabelCounter(
      'streams_aborted_total',
      'Streamed responses that did not end normally: by client (Envoy closed the stream: the client left, or Envoy reset it after a provider connection broke) or by provider (error event, cut short, silent)',
      'by',
      ['client', 'provider'],
    );
    this.idpRefreshes = this.oneLabelCounter('identity_key_refreshes_total', "Fetches or loads of the identity provider's public keys, by result", 'result', ['ok', 'error']);
    this.errors = this.oneLabelCounter(
      'sidecar_errors_total',
      'Internal failures: an authorization that threw (Envoy answers 503), an ext_proc handler that failed, a settlement that failed',
      'site',
      ['authorization', 'ext_proc', 'settlement'],
    );
    this.reloads = this.oneLabelCounter('config_reloads_total', 'Configuration reloads by result (applied, rejected)', 'result', ['applied', 'rejected']);
    this.configGeneration = new Gauge({ name: `${p}config_generation`, help: 'Reloads applied since start (0: the configuration read at start)', registers });
    new Gauge({
      name: `${p}build_info`,
      help: 'Build of the running sidecar (always 1)',
      labelNames: ['version', 'commit', 'node'],
      registers,
    })
      .labels(build.version, build.commit, process.version)
      .set(1);
    if (opts.processMetrics ?? true) collectDefaultMetrics({ register: this.registry, prefix: p });
  }

  /** A counter with one label whose known values are exported (at 0) from the start. */
  private oneLabelCounter(name: string, help: string, label: string, values: readonly string[]): Children<CounterChild> {
    const c = new Counter({ name: `${METRIC_PREFIX}${name}`, help, labelNames: [label], registers: [this.registry] });
    const children = new Children((v) => c.labels(...v));
    // Exported at 0 from the start, so rate() and alerts see them before the first event.
    for (const v of values) children.get(v).inc(0);
    return children;
  }

  /** One finished exchange (ext_proc): request count, tokens, phase latencies, aborted streams. */
  exchange(s: ExchangeSummary, route: string): void {
    this.requests.get(route, s.alias ?? '', s.status === null ? '' : String(s.status), s.errorCode ?? '').inc();
    const u = s.usage;
    if (u && s.alias) {
      this.tokens.get(s.alias, 'in').inc(u.promptTokens);
      this.tokens.get(s.alias, 'out').inc(u.completionTokens);
    }
    const t = s.timings;
    if (t.requestMs !== null) this.observe('request', t.requestMs);
    if (t.firstEventMs !== null) this.observe('first_event', t.firstEventMs);
    if (t.responseMs !== null) this.observe('response', t.responseMs);
    this.observe('end_to_end', t.totalMs);
    if (s.stream) {
      if (s.outcome === 'interrupted') this.streamsAborted.get('client').inc();
      else if (s.outcome === 'upstream_error' && s.status === 200) this.streamsAborted.get('provider').inc();
    }
  }

  /** A request ext_authz refused (it never reaches ext_proc). */
  refused(route: string, status: number, code: string | null): void {
    this.requests.get(route, '', String(status), code ?? '').inc();
  }

  observe(phase: Phase, ms: number): void {
    (this.phases.get(phase) as HistogramChild).observe(ms / 1000);
  }

  holdOpened(amount: number): void {
    this.holdsOpen.inc();
    this.heldAmount.inc(amount);
  }

  holdClosed(amount: number): void {
    this.holdsOpen.dec();
    this.heldAmount.dec(amount);
  }

  settlement(op: 'settle' | 'release', result: SettlementResult): void {
    this.settlements.get(op, result).inc();
  }

  journal(pending: number): void {
    this.journalPending.set(pending);
  }

  storeOperation(store: StoreName, seconds: number, ok: boolean, unavailable: boolean): void {
    this.storeOps.get(store, ok ? 'ok' : 'error').observe(seconds);
    if (unavailable) this.storeErrors.get(store).inc();
  }

  storeReachable(store: StoreName, up: boolean): void {
    this.storeUp.get(store).set(up ? 1 : 0);
  }

  identityRefresh(ok: boolean): void {
    this.idpRefreshes.get(ok ? 'ok' : 'error').inc();
  }

  error(site: ErrorSite): void {
    this.errors.get(site).inc();
  }

  reload(applied: boolean, generation: number): void {
    this.reloads.get(applied ? 'applied' : 'rejected').inc();
    if (applied) this.configGeneration.set(generation);
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
