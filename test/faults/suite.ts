/**
 * The fault suite: the real stack (real Envoy, the sidecar, the account
 * service, the simulator and a test-owned, persistent redis-server, all on
 * loopback), Redis and the credit check on, mixed traffic, and in turn one
 * fault per scenario. After each scenario:
 *   - the stack serves again (a chat answer and a whole stream);
 *   - `held` is back to 0 within the documented bound (1.5 × the hold lease,
 *     or the claim grace period for a hold Envoy never took on, plus the time
 *     a restart takes);
 *   - every completed request is in the usage counter;
 *   - opening balance + grants − closing balance = the sum of charges = the
 *     usage counter's costs, to the micro-unit;
 *   - Envoy's and the sidecar's memory are back near their baseline.
 * Each scenario is bounded in time (its traffic has a fixed count, every wait
 * a deadline). One line per scenario, then `N passed, N failed`.
 */
import { startGateway, type TestGateway } from '../harness/gateway.js';
import { books, reconciles, untilNothingHeld, type Books } from '../harness/money.js';
import { until } from '../harness/until.js';
import { listeningLine } from '../../sidecar/stack/process.js';
import { mixedTraffic, type Outcome, type Traffic } from './traffic.js';
import { MiB, mb, memory, sampleMemory, servesAgain, slowReader, unauthenticatedUpload, type Memory } from './probes.js';

export interface Mode {
  readonly name: 'short' | 'long';
  /** Requests of mixed traffic per scenario, and how many at once. */
  readonly requests: number;
  readonly connections: number;
  readonly leaseSeconds: number;
  /** billing.claimGraceSeconds: how long a hold Envoy never took on to the response waits before it is released. */
  readonly claimGraceSeconds: number;
  readonly drainSeconds: number;
  /** Each scenario, everything included, ends within this. */
  readonly scenarioTimeoutMs: number;
  readonly slowReaders: number;
  readonly slowReaderHoldMs: number;
  /** Tokens of each unread stream (~150 bytes each): far more than a bounded buffer may hold. */
  readonly slowReaderTokens: number;
  readonly floodUploads: number;
  readonly floodBytes: number;
  /** How long the sidecar stays frozen (SIGSTOP): longer than Envoy's PING bound to it (about 8.5 s). */
  readonly freezeMs: number;
}

export const SHORT: Mode = {
  name: 'short',
  requests: 32,
  connections: 8,
  leaseSeconds: 2,
  claimGraceSeconds: 4,
  drainSeconds: 5,
  scenarioTimeoutMs: 90_000,
  slowReaders: 10,
  slowReaderHoldMs: 5_000,
  slowReaderTokens: 50_000,
  floodUploads: 6,
  floodBytes: 8 * MiB,
  freezeMs: 10_000,
};

export const LONG: Mode = {
  name: 'long',
  requests: 240,
  connections: 16,
  leaseSeconds: 3,
  claimGraceSeconds: 6,
  drainSeconds: 10,
  scenarioTimeoutMs: 240_000,
  slowReaders: 20,
  slowReaderHoldMs: 15_000,
  slowReaderTokens: 100_000,
  floodUploads: 12,
  floodBytes: 31 * 1000 * 1000,
  freezeMs: 15_000,
};

/** After a scenario, memory this far above the baseline is a leak. */
const ENVOY_SLACK = 8 * MiB;
// The sidecar's resident memory: V8 keeps heap it grew into (streams of several MiB in flight)
// rather than returning it at once, so this bounds growth, not a return to the exact baseline.
const SIDECAR_SLACK = 128 * MiB;
/** What one unread stream may pin in Envoy (see the slow-reader scenario). */
const SLOW_READER_MAX = 3 * MiB;
const GRANT = 500_000_000;

interface Ctx {
  readonly gw: TestGateway;
  readonly mode: Mode;
  readonly key: string;
  readonly traffic: Traffic;
  readonly baseline: Memory;
  /** Problems found while the fault was on (e.g. memory pinned by a flood). */
  readonly problems: string[];
  /** What the fault set in motion that passing does not show (printed with the summary). */
  readonly notes: string[];
  /** When the fault struck (for the time until nothing is held). */
  struckAt: number;
}

export interface Scenario {
  readonly name: string;
  /** Set when the scenario is expected to pass only once another change lands. */
  readonly awaits?: string;
  fault(ctx: Ctx): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The fault strikes once a quarter of the traffic is done (requests of every kind in flight). */
const midTraffic = async (ctx: Ctx) => {
  await until('traffic under way', () => ctx.traffic.finished() >= ctx.mode.requests / 4, 60_000);
  ctx.struckAt = Date.now();
};

/** Mid-traffic: `signal` to one of the stack's processes, wait for its exit, then start it again. */
async function signalAndRestart(ctx: Ctx, name: string, signal: NodeJS.Signals, check?: (lines: readonly string[]) => void): Promise<void> {
  await midTraffic(ctx);
  const p = ctx.gw.stack.process(name);
  p.signal(signal);
  await p.exitedNow();
  check?.(p.lines);
  await sleep(250);
  await p.restart();
  await p.waitForLine(listeningLine, 20_000);
  // A sidecar killed between an answer and its settlement's store write settles it at restart.
  const adopted = p.lines.find((l) => l.includes('settlements the previous run recorded'));
  if (adopted) ctx.notes.push(`${/"settlements":(\d+)/.exec(adopted)?.[1] ?? 'some'} settlements the killed sidecar had recorded journaled again at restart (idempotent)`);
}

/** Mid-traffic: a process stopped (not killed) for the mode's freeze, then resumed. */
async function frozenFor(ctx: Ctx, stop: () => unknown, resume: () => unknown): Promise<void> {
  await midTraffic(ctx);
  await stop();
  try {
    await sleep(ctx.mode.freezeMs);
  } finally {
    await resume();
  }
}

export const SCENARIOS: readonly Scenario[] = [
  {
    name: 'sidecar SIGTERM, then started again',
    fault: (ctx) =>
      signalAndRestart(ctx, 'sidecar', 'SIGTERM', (lines) => {
        if (!lines.some((l) => l.includes('drained; closing the store connections'))) ctx.problems.push('the sidecar did not log its drain');
      }),
  },
  { name: 'sidecar kill -9, then started again', fault: (ctx) => signalAndRestart(ctx, 'sidecar', 'SIGKILL') },
  {
    name: 'Redis stopped and restarted',
    async fault(ctx) {
      await midTraffic(ctx);
      const redis = ctx.gw.redis!;
      await redis.kill();
      await sleep(1000);
      await redis.restart();
    },
  },
  { name: 'provider killed mid-stream', fault: (ctx) => signalAndRestart(ctx, 'simulator', 'SIGKILL') },
  {
    // The port open, nothing answered: every store command runs into its deadline (a 503 for
    // what needs Redis, the rest served from credit leases and journaled) until it resumes.
    name: 'Redis frozen (SIGSTOP), then resumed',
    fault: (ctx) => frozenFor(ctx, () => ctx.gw.redis!.pause(), () => ctx.gw.redis!.resume()),
  },
  {
    // Not dead, not answering (a stuck event loop, a paused container): Envoy gives up on it
    // (ext_authz after 2 s, its connection after an unanswered PING), and when it resumes it
    // finds its holds' leases run out and reaped: its settlements then come from the balance.
    name: 'sidecar frozen (SIGSTOP), then resumed',
    fault: (ctx) =>
      frozenFor(
        ctx,
        () => ctx.gw.stack.process('sidecar').signal('SIGSTOP'),
        () => ctx.gw.stack.process('sidecar').signal('SIGCONT'),
      ),
  },
  {
    name: 'slow readers hold streams unread',
    async fault(ctx) {
      const peak = sampleMemory(ctx.gw);
      const readers = Array.from({ length: ctx.mode.slowReaders }, () => slowReader(ctx.gw, ctx.key, ctx.mode.slowReaderTokens));
      await Promise.all(readers.map((r) => r.started));
      await sleep(ctx.mode.slowReaderHoldMs);
      const p = await peak.stop();
      for (const r of readers) r.release();
      // Bounded per stream, in both modes: a reader that reads nothing pins Envoy's connection
      // buffers (limits.connectionBufferBytes) plus what was on its way through the sidecar when
      // the provider was paused; the sidecar cluster's 64 KiB stream window pauses the provider as
      // soon as the sidecar lags (test/integration/slow-reader.test.ts). Measured 1.8 to 2.4 MiB a
      // stream with the suite's other traffic running; unbounded (16 MiB window), whole streams.
      const bound = ctx.baseline.envoy + ctx.mode.slowReaders * SLOW_READER_MAX + ENVOY_SLACK;
      if (p.envoy > bound) ctx.problems.push(`Envoy held ${mb(p.envoy - ctx.baseline.envoy)} for ${ctx.mode.slowReaders} slow readers (bound ${mb(bound - ctx.baseline.envoy)})`);
    },
  },
  {
    name: 'unauthenticated large bodies flood',
    async fault(ctx) {
      const peak = sampleMemory(ctx.gw);
      const statuses = await Promise.all(Array.from({ length: ctx.mode.floodUploads }, () => unauthenticatedUpload(ctx.gw, ctx.mode.floodBytes)));
      const p = await peak.stop();
      const served = statuses.filter((s) => s >= 200 && s < 300).length;
      if (served) ctx.problems.push(`${served} unauthenticated uploads were served`);
      const bound = ctx.baseline.envoy + ENVOY_SLACK;
      if (p.envoy > bound) ctx.problems.push(`Envoy peaked ${mb(p.envoy - ctx.baseline.envoy)} above idle during the flood (bound ${mb(ENVOY_SLACK)})`);
    },
  },
];

/** Every completed request is in the usage counter (journaled settlements are retried every 2 s). */
async function untilCounted(gw: TestGateway, tenant: string, outcomes: readonly Outcome[], timeoutMs: number): Promise<{ books: Books; missing: string[] }> {
  const ids = outcomes.filter((o) => o.completed && o.requestId).map((o) => o.requestId as string);
  const end = Date.now() + timeoutMs;
  for (;;) {
    const b = await books(gw.admin, tenant);
    const missing = ids.filter((id) => !b.usageIds.has(id));
    if (missing.length === 0 || Date.now() > end) return { books: b, missing };
    await sleep(200);
  }
}

async function untilMemoryBack(gw: TestGateway, baseline: Memory, timeoutMs: number): Promise<Memory> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const m = await memory(gw);
    if ((m.envoy <= baseline.envoy + ENVOY_SLACK && m.sidecar <= baseline.sidecar + SIDECAR_SLACK) || Date.now() > end) return m;
    await sleep(250);
  }
}

export interface Result {
  readonly name: string;
  readonly passed: boolean;
  readonly awaits?: string;
  readonly line: string;
}

async function runScenario(gw: TestGateway, mode: Mode, s: Scenario, baseline: Memory): Promise<Result> {
  const started = Date.now();
  const problems: string[] = [];
  const t = await gw.admin.createTenant(`faults ${s.name}`);
  const { key } = await gw.admin.createKey(t.id, { scopes: ['ai'] });
  await gw.admin.adjustCredits(t.id, GRANT, `faults-${t.id}`, 'fault suite');
  const traffic = mixedTraffic(gw.base, key, mode.requests, mode.connections);
  const notes: string[] = [];
  const ctx: Ctx = { gw, mode, key, traffic, baseline, problems, notes, struckAt: Date.now() };
  let outcomes: Outcome[] = [];
  let summary = '';
  const body = async () => {
    await s.fault(ctx);
    outcomes = await traffic.done;
    for (const name of ['simulator', 'account', 'sidecar', 'envoy']) {
      if (!gw.stack.process(name).running) problems.push(`${name} is not running`);
    }
    // The stack serves again within 15 s (a Redis client reconnects with a back-off).
    let serves = await servesAgain(gw, key);
    for (const end = Date.now() + 15_000; serves && Date.now() < end; serves = await servesAgain(gw, key)) await sleep(250);
    if (serves) problems.push(`does not serve again: ${serves}`);
    // Documented bounds: a dead owner's holds go within 1.5 × the lease; a hold whose request Envoy
    // gave up on before the response (a frozen sidecar answered its check too late) within the claim
    // grace period; journaled settlements within 2 s of Redis being back.
    const boundMs = Math.max(1.5 * mode.leaseSeconds, mode.claimGraceSeconds) * 1000 + 5_000;
    let heldZero = '';
    try {
      await untilNothingHeld(gw.admin, t.id, boundMs);
      heldZero = `nothing held ${((Date.now() - ctx.struckAt) / 1000).toFixed(1)} s after the fault`;
    } catch (err) {
      problems.push((err as Error).message);
    }
    const counted = await untilCounted(gw, t.id, outcomes, 5_000);
    if (counted.missing.length) problems.push(`${counted.missing.length} completed requests missing from the usage counter`);
    const money = reconciles(counted.books);
    if (!money.ok) problems.push(`books do not reconcile: ${money.detail}`);
    const m = await untilMemoryBack(gw, baseline, 15_000);
    if (m.envoy > baseline.envoy + ENVOY_SLACK) problems.push(`Envoy memory ${mb(m.envoy)} vs baseline ${mb(baseline.envoy)}`);
    if (m.sidecar > baseline.sidecar + SIDECAR_SLACK) problems.push(`sidecar memory ${mb(m.sidecar)} vs baseline ${mb(baseline.sidecar)}`);
    const completed = outcomes.filter((o) => o.completed).length;
    summary = `${outcomes.length} requests, ${completed} completed; ${money.detail}; ${heldZero}; Envoy ${mb(m.envoy)}, sidecar ${mb(m.sidecar)}${notes.map((n) => `; ${n}`).join('')}`;
  };
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      body(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`scenario over its ${mode.scenarioTimeoutMs / 1000} s bound`)), mode.scenarioTimeoutMs);
      }),
    ]);
  } catch (err) {
    problems.push((err as Error).message);
  } finally {
    clearTimeout(timer);
  }
  const passed = problems.length === 0;
  const secs = ((Date.now() - started) / 1000).toFixed(1);
  const verdict = passed ? 'PASS' : s.awaits ? `FAIL (expected until ${s.awaits} lands)` : 'FAIL';
  const line = `${verdict}  ${s.name} (${secs} s): ${passed ? summary : problems.join('; ')}`;
  return { name: s.name, passed, awaits: s.awaits, line };
}

/** Starts the stack, runs the scenarios of `mode` in turn, stops the stack; one line per scenario through `print`. */
export async function runFaultSuite(mode: Mode, print: (line: string) => void, only?: (s: Scenario) => boolean): Promise<Result[]> {
  const gw = await startGateway({
    store: 'redis',
    redisPersistent: true,
    config: {
      billing: { creditCheck: true, holdLeaseSeconds: mode.leaseSeconds, claimGraceSeconds: mode.claimGraceSeconds },
      shutdown: { drainSeconds: mode.drainSeconds },
    },
  });
  const results: Result[] = [];
  try {
    // Warm up (connections, JIT, allocator pools), then the baseline.
    await gw.admin.adjustCredits(gw.tenantId, GRANT, 'faults-warmup', 'warm-up');
    for (let i = 0; i < 3; i++) await servesAgain(gw, gw.key);
    await sleep(500);
    const baseline = await memory(gw);
    print(`baseline: Envoy ${mb(baseline.envoy)}, sidecar ${mb(baseline.sidecar)} (${mode.name} mode: ${mode.requests} requests per scenario, hold lease ${mode.leaseSeconds} s)`);
    for (const s of SCENARIOS) {
      if (only && !only(s)) continue;
      const r = await runScenario(gw, mode, s, baseline);
      print(r.line);
      results.push(r);
    }
  } finally {
    await gw.stop();
  }
  const passed = results.filter((r) => r.passed).length;
  const awaiting = results.filter((r) => !r.passed && r.awaits).length;
  if (awaiting) print(`(${awaiting} of the failures await other changes)`);
  print(`${passed} passed, ${results.length - passed} failed`);
  return results;
}
