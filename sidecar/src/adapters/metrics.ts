import { Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { ExchangeSummary } from '../domain/exchange.js';
import { FastHistogram, FastValue, type HistogramChild, type ValueChild } from './fast-metrics.js';

/**
 * The sidecar's Prometheus metrics (served on the operator port, /metrics).
 *
 * Labels are bounded sets only: route, alias (catalogue aliases, never what a
 * caller typed), HTTP status, error code (the catalogue's), phase, result.
 * No tenant id, key id or credential is ever a label or a value.
 *
 * The hot path stays cheap: per-request metrics are fast-metrics.ts's plain
 * numbers (a label combination is found through nested maps, created once),
 * the children of fixed label sets are looked up once here, and nothing is
 * formatted until Prometheus scrapes.
 */

export const METRIC_PREFIX = 'gateway_';

/** Latency buckets (seconds): sub-millisecond authorization up to multi-minute streams. */
const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const STORE_BUCKETS = [0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];

const PHASES = ['authorization', 'request', 'first_event', 'response', 'end_to_end'] as const;
export type Phase = (typeof PHASES)[number];
export type StoreName = 'keys' | 'ledger';
export type SettlementResult = 'applied' | 'journaled' | 'retried' | 'failed';
export type ErrorSite = 'authorization' | 'ext_proc' | 'settlement';

export interface BuildInfo {
  readonly version: string;
  readonly commit: string;
}

/** Paths ext_authz sees, as route label values (bounded); ext_proc's exchanges carry their own route. */
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

/** A metric's children for a fixed list of label values, created (and so exported at 0) up front. */
function fixed<C, K extends string>(metric: { labels(...v: string[]): C }, values: readonly K[]): Record<K, C> {
  return Object.fromEntries(values.map((v) => [v, metric.labels(v)])) as Record<K, C>;
}

export class GatewayMetrics {
  readonly registry = new Registry();
  private readonly requests: FastValue;
  private readonly tokens: FastValue;
  private readonly phases: Record<Phase, HistogramChild>;
  private readonly holdsOpen: ValueChild;
  private readonly heldAmount: ValueChild;
  private readonly settlements: FastValue;
  private readonly journalPending: Gauge;
  private readonly admissions: Record<'lease' | 'direct', ValueChild>;
  private leasedReader: () => number = () => 0;
  private readonly storeOps: Record<StoreName, { ok: HistogramChild; error: HistogramChild }>;
  private readonly storeErrors: Record<StoreName, ValueChild>;
  private readonly storeUp: Gauge;
  private readonly streamsAborted: Record<'client' | 'provider', ValueChild>;
  private readonly idpRefreshes: Record<'ok' | 'error', ValueChild>;
  private readonly errors: Record<ErrorSite, ValueChild>;
  private readonly reloads: Record<'applied' | 'rejected', ValueChild>;
  private readonly configGeneration: Gauge;
  private readonly configInfo: Gauge;

  constructor(build: BuildInfo, opts: { processMetrics?: boolean } = {}) {
    const r = this.registry;
    const p = METRIC_PREFIX;
    this.requests = new FastValue('counter', `${p}requests_total`, 'Requests seen by the sidecar, by route, alias, HTTP status and error code ("" when none)', ['route', 'alias', 'status', 'code'], r);
    const phase = new FastHistogram(
      `${p}phase_duration_seconds`,
      'Latency per phase: authorization (ext_authz check in the sidecar), request (until the provider answered with headers), first_event (until the first streamed event reached the caller), response (provider headers to the end of the response), end_to_end (ext_proc start to the end of the response)',
      ['phase'],
      LATENCY_BUCKETS,
      r,
    );
    this.phases = fixed(phase, PHASES);
    this.tokens = new FastValue('counter', `${p}tokens_total`, 'Tokens by alias and direction (in: prompt, out: completion, reasoning included)', ['alias', 'direction'], r);
    this.holdsOpen = new FastValue('gauge', `${p}credit_holds_open`, 'Credit holds this instance placed that are not settled or released yet', [], r).labels();
    this.heldAmount = new FastValue('gauge', `${p}credit_held_micro`, 'Micro-units held by the open holds of this instance', [], r).labels();
    this.settlements = new FastValue(
      'counter',
      `${p}settlements_total`,
      'Settlements and releases: applied at once, journaled (store unreachable), retried from the journal and applied, failed (never applicable; hold released)',
      ['op', 'result'],
      r,
    );
    for (const op of ['settle', 'release']) for (const res of ['applied', 'journaled', 'retried', 'failed']) this.settlements.labels(op, res);
    this.admissions = fixed(
      new FastValue('counter', `${p}credit_admissions_total`, 'Admitted requests by how their credit hold was placed: moved out of a credit lease (no store round trip before the answer) or placed directly', ['via'], r),
      ['lease', 'direct'],
    );
    const leased = () => this.leasedReader();
    new Gauge({
      name: `${p}credit_leased_micro`,
      help: "Micro-units this instance has set aside in credit leases and not yet moved into request holds (part of the tenants' held credit)",
      registers: [r],
      collect() {
        this.set(leased());
      },
    });
    this.journalPending = new Gauge({ name: `${p}settlement_journal_pending`, help: 'Operations waiting in the local settlement journal', registers: [r] });
    const storeOps = new FastHistogram(`${p}store_operation_duration_seconds`, 'Store (keys) and ledger operations, by store and result (ok, error)', ['store', 'result'], STORE_BUCKETS, r);
    const storeOpsOf = (s: StoreName) => ({ ok: storeOps.labels(s, 'ok'), error: storeOps.labels(s, 'error') });
    this.storeOps = { keys: storeOpsOf('keys'), ledger: storeOpsOf('ledger') };
    this.storeErrors = fixed(new FastValue('counter', `${p}store_errors_total`, 'Store operations that failed because the store could not be reached', ['store'], r), ['keys', 'ledger']);
    this.storeUp = new Gauge({ name: `${p}store_up`, help: '1 when the last periodic ping of the store succeeded', labelNames: ['store'], registers: [r] });
    this.streamsAborted = fixed(
      new FastValue(
        'counter',
        `${p}streams_aborted_total`,
        'Streamed responses that did not end normally: by client (Envoy closed the stream: the client left, or Envoy reset it after a provider connection broke) or by provider (error event, cut short, silent)',
        ['by'],
        r,
      ),
      ['client', 'provider'],
    );
    this.idpRefreshes = fixed(new FastValue('counter', `${p}identity_key_refreshes_total`, "Fetches or loads of the identity provider's public keys, by result", ['result'], r), ['ok', 'error']);
    this.errors = fixed(
      new FastValue('counter', `${p}sidecar_errors_total`, 'Internal failures: an authorization that threw (Envoy answers 503), an ext_proc handler that failed, a settlement that failed', ['site'], r),
      ['authorization', 'ext_proc', 'settlement'],
    );
    this.reloads = fixed(new FastValue('counter', `${p}config_reloads_total`, 'Configuration reloads by result (applied, rejected)', ['result'], r), ['applied', 'rejected']);
    this.configGeneration = new Gauge({ name: `${p}config_generation`, help: 'Reloads applied since start (0: the configuration read at start)', registers: [r] });
    this.configInfo = new Gauge({
      name: `${p}config_info`,
      help: 'Fingerprint of the live reloadable settings (models, prices, limits, billing); instances serving alike show the same settings_hash',
      labelNames: ['settings_hash'],
      registers: [r],
    });
    new Gauge({ name: `${p}build_info`, help: 'Build of the running sidecar (always 1)', labelNames: ['version', 'commit', 'node'], registers: [r] })
      .labels(build.version, build.commit, process.version)
      .set(1);
    if (opts.processMetrics ?? true) collectDefaultMetrics({ register: r, prefix: p });
  }

  /** One finished exchange (ext_proc): request count, tokens, phase latencies, aborted streams. */
  exchange(s: ExchangeSummary): void {
    this.requests.labels(s.route, s.alias ?? '', s.status === null ? '' : String(s.status), s.errorCode ?? '').value++;
    const u = s.usage;
    if (u && s.alias) {
      this.tokens.labels(s.alias, 'in').value += u.promptTokens;
      this.tokens.labels(s.alias, 'out').value += u.completionTokens;
    }
    const t = s.timings;
    if (t.requestMs !== null) this.phases.request.observe(t.requestMs / 1000);
    if (t.firstEventMs !== null) this.phases.first_event.observe(t.firstEventMs / 1000);
    if (t.responseMs !== null) this.phases.response.observe(t.responseMs / 1000);
    this.phases.end_to_end.observe(t.totalMs / 1000);
    if (s.stream) {
      if (s.outcome === 'interrupted') this.streamsAborted.client.value++;
      else if (s.outcome === 'upstream_error' && s.status === 200) this.streamsAborted.provider.value++;
    }
  }

  /** A request ext_authz refused (it never reaches ext_proc); route from routeLabel(). */
  refused(route: string, status: number, code: string | null): void {
    this.requests.labels(route, '', String(status), code ?? '').value++;
  }

  observe(phase: Phase, ms: number): void {
    this.phases[phase].observe(ms / 1000);
  }

  admitted(via: 'lease' | 'direct'): void {
    this.admissions[via].value++;
  }

  /** Where the credit_leased_micro gauge reads its value at each scrape. */
  watchLeased(read: () => number): void {
    this.leasedReader = read;
  }

  holdOpened(amount: number): void {
    this.holdsOpen.value++;
    this.heldAmount.value += amount;
  }

  holdClosed(amount: number): void {
    this.holdsOpen.value--;
    this.heldAmount.value -= amount;
  }

  settlement(op: 'settle' | 'release', result: SettlementResult): void {
    this.settlements.labels(op, result).value++;
  }

  journal(pending: number): void {
    this.journalPending.set(pending);
  }

  storeOperation(store: StoreName, seconds: number, ok: boolean, unavailable: boolean): void {
    this.storeOps[store][ok ? 'ok' : 'error'].observe(seconds);
    if (unavailable) this.storeErrors[store].value++;
  }

  storeReachable(store: StoreName, up: boolean): void {
    this.storeUp.labels(store).set(up ? 1 : 0);
  }

  identityRefresh(ok: boolean): void {
    this.idpRefreshes[ok ? 'ok' : 'error'].value++;
  }

  error(site: ErrorSite): void {
    this.errors[site].value++;
  }

  reload(applied: boolean, generation: number, settingsHash: string): void {
    this.reloads[applied ? 'applied' : 'rejected'].value++;
    this.settings(generation, settingsHash);
  }

  /** The live settings: their generation and fingerprint (one info sample). */
  settings(generation: number, settingsHash: string): void {
    this.configGeneration.set(generation);
    this.configInfo.reset();
    this.configInfo.labels(settingsHash).set(1);
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
