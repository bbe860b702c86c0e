/**
 * The benchmark's targets, all in one run and against ONE simulator process:
 *
 *   direct   the upstream simulator itself (internal model name, provider bearer key);
 *   bare     a second Envoy with the gateway's listener/route/cluster shape but
 *            only the router filter (sidecar/stack/envoy-bare.ts);
 *   gateway  the full gateway (Envoy + ext_authz + ext_proc sidecar + account service),
 *            memory store.
 *
 * and, when a selected scenario names them (GATEWAY_VARIANTS), further full
 * gateways, each a whole second topology with its own simulator, started the
 * same way with a different store/config:
 *
 *   redis    store 'redis' (a private redis-server), credit check off;
 *   credit   store 'redis', billing.creditCheck on, test tenant granted a large balance.
 *
 * The full stack is started exactly as the integration tests start it
 * (test/harness/gateway.ts), so a benchmark number and a test failure are
 * about the same topology.
 *
 * Cleanup: stopTargets() stops everything that was started; the signal
 * handlers installed by installCleanupHandlers() run it on Ctrl-C / SIGTERM,
 * and as a last resort signal any child process of this process that is
 * still alive (by pid, found through /proc), so a run interrupted half-way
 * through start-up leaves nothing behind. Temporary files: from start-up to
 * the end of the run, TMPDIR points at one directory of this run (the harness makes its
 * run directories and redis-server directories with tmpdir()), so a gateway
 * interrupted half-way through its start-up leaves no directory behind either;
 * removeBenchRoot() deletes it. The processes themselves get the real TMPDIR.
 */
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildEnvoyBootstrap, toYaml } from '../../sidecar/stack/envoy-config.js';
import { bareBootstrap, relocatedBootstrap } from '../../sidecar/stack/envoy-bare.js';
import { envoyVersion, requireEnvoy } from '../../sidecar/stack/envoy-bin.js';
import { ManagedProcess } from '../../sidecar/stack/process.js';
import { flowHeaderName } from '../../sidecar/src/adapters/envoy/authz-service.js';
import { startGateway, type GatewayOptions, type TestGateway } from '../harness/gateway.js';
import { freePort } from '../harness/ports.js';
import { RedisProbe } from './redis-stats.js';

/** Extra full gateways a scenario can ask for (Scenario.gateway). */
export type GatewayVariant = 'redis' | 'credit';

/** Balance granted to the credit-check-on gateway's tenant, micro-units (1e12 = 1,000,000 CHF). */
export const CREDIT_GRANT = 1_000_000_000_000;

export const GATEWAY_VARIANTS: Readonly<Record<GatewayVariant, { readonly describe: string; readonly options: GatewayOptions; readonly grant: boolean }>> = {
  redis: { describe: "store 'redis', credit check off", options: { store: 'redis' }, grant: false },
  credit: {
    describe: `store 'redis', billing.creditCheck on, tenant granted ${CREDIT_GRANT} micro-units`,
    options: { store: 'redis', config: { billing: { creditCheck: true } } },
    grant: true,
  },
};

/** A full gateway besides the main one. */
export interface VariantTarget {
  readonly name: GatewayVariant;
  readonly describe: string;
  /** Gateway base URL including /v1. */
  readonly base: string;
  /** A key with scope ai of this gateway's test tenant. */
  readonly key: string;
  readonly gateway: TestGateway;
  readonly redisUrl: string;
  /** Connection for INFO commandstats (closed by stopTargets). */
  readonly redis: RedisProbe;
  pids(): Record<string, number | undefined>;
}

export interface Targets {
  readonly envoyBin: string;
  readonly envoyVersion: string;
  /** --concurrency of both Envoys (read from the gateway Envoy's command line). */
  readonly envoyConcurrency: number;
  /** Simulator base URL without /v1, e.g. http://127.0.0.1:1234. */
  readonly simulatorUrl: string;
  /** Provider key the simulator demands as `Authorization: Bearer`. */
  readonly upstreamKey: string;
  /** Bare Envoy base URL without /v1. */
  readonly bareUrl: string;
  /** Floor base URL without /v1: the gateway's Envoy bootstrap on the no-op sidecar (null-sidecar.ts). */
  readonly floorUrl: string;
  /**
   * The same floor with answers shaped like the gateway's (FLOOR_SHAPES in null-sidecar.ts),
   * when TargetOptions.shapedFloor asked for it; else null.
   */
  readonly shapedFloorUrl: string | null;
  /** Gateway base URL including /v1. */
  readonly gatewayBase: string;
  /** A gateway key with scope ai. */
  readonly gatewayKey: string;
  readonly gateway: TestGateway;
  /** The extra gateways that were started. */
  readonly variants: readonly VariantTarget[];
  /** An extra gateway; throws when it was not started. */
  variant(name: GatewayVariant): VariantTarget;
  /**
   * pid of each process of the topology a scenario measures, by name: the main
   * gateway's processes and the bare Envoy, or with a variant that gateway's
   * own processes (and its redis-server) in their place.
   */
  pids(variant?: GatewayVariant): Record<string, number | undefined>;
  logs(): string;
  /** The recent output lines (access log included) of the Envoy serving `url`: bare, floor, the gateway or a variant. */
  envoyLines(url: string): readonly string[];
  /** The admin URL of the Envoy serving `url` when that Envoy talks to a sidecar (null: bare Envoy or none). */
  envoyAdminFor(url: string): string | null;
  /**
   * Non-2xx entries among the recent access-log lines of every Envoy (the last
   * 2000 lines each process keeps), tallied as "process status flags details".
   * For explaining a non-2xx count; it includes the warm-ups and, at the end of
   * each autocannon run, the requests cut off in flight (status 0, DC).
   */
  accessLogProblems(): Map<string, number>;
}

const cleanups: Array<() => Promise<void>> = [];

const NULL_SIDECAR = fileURLToPath(new URL('./null-sidecar.ts', import.meta.url));

/** tmpdir() before this run redirected it. */
const REAL_TMPDIR = tmpdir();
const ORIGINAL_TMPDIR_ENV = process.env.TMPDIR;
let benchRoot: string | null = null;

/** Creates the run's temporary directory and points tmpdir() at it (for the harness). */
function makeBenchRoot(): string {
  benchRoot ??= mkdtempSync(join(REAL_TMPDIR, 'gw-bench-'));
  process.env.TMPDIR = benchRoot;
  return benchRoot;
}

/** Removes the run's temporary directory and restores TMPDIR; idempotent. Call once nothing runs any more. */
export function removeBenchRoot(): void {
  if (ORIGINAL_TMPDIR_ENV === undefined) delete process.env.TMPDIR;
  else process.env.TMPDIR = ORIGINAL_TMPDIR_ENV;
  if (benchRoot === null) return;
  try {
    rmSync(benchRoot, { recursive: true, force: true });
    benchRoot = null;
  } catch (err) {
    process.stderr.write(`bench: could not remove ${benchRoot}: ${(err as Error).message}\n`);
  }
}

/** Stops everything started so far, newest first; safe to call more than once. */
export async function stopTargets(): Promise<void> {
  while (cleanups.length > 0) {
    const c = cleanups.pop();
    try {
      await c?.();
    } catch (err) {
      process.stderr.write(`bench: cleanup failed: ${(err as Error).message}\n`);
    }
  }
}

/** The value of `--concurrency` on a running Envoy's command line (Linux /proc), or null. */
function concurrencyOf(pid: number | undefined): number | null {
  if (pid === undefined) return null;
  try {
    const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    const i = argv.indexOf('--concurrency');
    const v = i >= 0 ? Number(argv[i + 1]) : NaN;
    return Number.isInteger(v) && v > 0 ? v : null;
  } catch {
    return null;
  }
}

export interface TargetOptions {
  /** Extra gateways to start besides the main one. */
  readonly variants?: readonly GatewayVariant[];
  /** Also a floor whose answers have the gateway's shape (what Envoy spends applying them). */
  readonly shapedFloor?: boolean;
  readonly echo?: boolean;
}

/** Space-separated command-line flags from an environment variable (none when unset). */
export const flagsFrom = (value: string | undefined): string[] => (value ?? '').split(' ').filter(Boolean);

/** The gateway's options with more Node/V8 flags for its sidecar, after the ones it has. */
export function withSidecarArgs(opts: GatewayOptions, args: readonly string[]): GatewayOptions {
  if (!args.length) return opts;
  return { ...opts, nodeArgs: { ...(opts.nodeArgs ?? {}), sidecar: [...(opts.nodeArgs?.sidecar ?? []), ...args] } };
}

/**
 * startGateway with cleanups registered; the settlement journal goes to the
 * run's own temporary directory (the default, .run/ in the repository, would
 * be shared by every gateway of the run and by `npm start`).
 */
async function startOneGateway(name: string, opts: GatewayOptions, benchDir: string): Promise<TestGateway> {
  const journalPath = join(benchDir, `${name}-settlement-journal.jsonl`);
  const cfg = opts.config ?? {};
  const billing = (cfg.billing ?? {}) as Record<string, unknown>;
  // The processes keep the real temporary directory (tsx's compile cache lives there).
  const env = { ...(opts.env ?? {}), TMPDIR: REAL_TMPDIR };
  // BENCH_SIDECAR_NODE_ARGS: more V8/Node flags for every gateway's sidecar (after its own heap flags), to measure a setting in the full bench.
  const withArgs = withSidecarArgs(opts, flagsFrom(process.env.BENCH_SIDECAR_NODE_ARGS));
  const gw = await startGateway({ ...withArgs, env, config: { ...cfg, billing: { ...billing, journalPath } } });
  const runDir = runDirOf(gw);
  // startGateway leaves its temporary run directory behind; this run created it, so it goes too.
  cleanups.push(() => Promise.resolve(rmSync(runDir, { recursive: true, force: true })));
  cleanups.push(() => gw.stop());
  return gw;
}

export async function startTargets(opts: TargetOptions = {}): Promise<Targets> {
  const envoyBin = requireEnvoy();
  const version = envoyVersion(envoyBin);

  const benchDir = makeBenchRoot();
  cleanups.push(() => Promise.resolve(removeBenchRoot()));

  const gw = await startOneGateway('main', {}, benchDir);

  const gatewayEnvoy = gw.stack.process('envoy');
  const concurrency = concurrencyOf(gatewayEnvoy.pid) ?? 2;

  // Same bootstrap the stack rendered (startStack: renderEnvoyConfig(cfg)), minus the filters.
  const full = buildEnvoyBootstrap(gw.config);
  const [listenPort, adminPort] = await Promise.all([freePort(), freePort()]);
  const bare = bareBootstrap(full, { listenPort, adminPort });
  const barePath = join(benchDir, 'envoy-bare.yaml');
  writeFileSync(barePath, toYaml(bare));
  const bareEnvoy = new ManagedProcess(
    'envoy-bare',
    envoyBin,
    ['-c', barePath, '--log-level', 'warn', '--use-dynamic-base-id', '--concurrency', String(concurrency)],
    { echo: opts.echo },
  );
  cleanups.push(() => bareEnvoy.stop());
  const bareHost = ['0.0.0.0', '::'].includes(gw.config.listen.gateway.host) ? '127.0.0.1' : gw.config.listen.gateway.host;
  await bareEnvoy.waitForLive(`http://${gw.config.listen.envoyAdmin.host}:${adminPort}/ready`, 20_000);

  // The floor: the gateway's own bootstrap (same filters and ext_proc modes) against the no-op sidecar.
  const flowHeader = flowHeaderName(gw.config.brand);
  const startFloor = async (suffix: string, shapes: boolean) => {
    const socket = `unix:${join(benchDir, `null-sidecar-${suffix}.sock`)}`;
    const sidecar = new ManagedProcess(`null-sidecar-${suffix}`, process.execPath, ['--import', 'tsx', NULL_SIDECAR, socket, gw.upstreamKey, flowHeader], {
      echo: opts.echo,
      env: { ...process.env, TMPDIR: REAL_TMPDIR, FLOOR_SHAPES: shapes ? '1' : '0' },
    });
    cleanups.push(() => sidecar.stop());
    await sidecar.waitForLine((l) => (l === 'READY' ? true : undefined), 20_000);
    const [port, adminPort] = await Promise.all([freePort(), freePort()]);
    const path = join(benchDir, `envoy-${suffix}.yaml`);
    writeFileSync(path, toYaml(relocatedBootstrap(buildEnvoyBootstrap(gw.config, { sidecarAddress: socket }), { suffix, listenPort: port, adminPort })));
    const envoy = new ManagedProcess(
      `envoy-${suffix}`,
      envoyBin,
      ['-c', path, '--log-level', 'warn', '--use-dynamic-base-id', '--concurrency', String(concurrency)],
      { echo: opts.echo },
    );
    cleanups.push(() => envoy.stop());
    const admin = `http://${gw.config.listen.envoyAdmin.host}:${adminPort}`;
    await envoy.waitForLive(`${admin}/ready`, 20_000);
    return { sidecar, envoy, url: `http://${bareHost}:${port}`, admin };
  };
  const floor = await startFloor('floor', false);
  const shaped = opts.shapedFloor ? await startFloor('floor-shaped', true) : null;

  // One after the other: each is a whole topology, and two CPUs starting them at once gain little.
  const variants: VariantTarget[] = [];
  for (const name of new Set(opts.variants ?? [])) {
    const spec = GATEWAY_VARIANTS[name];
    const vgw = await startOneGateway(name, spec.options, benchDir);
    if (!vgw.redis) throw new Error(`bench: gateway variant ${name} has no redis-server`);
    if (spec.grant) await vgw.admin.adjustCredits(vgw.tenantId, CREDIT_GRANT, 'bench-grant', 'bench');
    const probe = new RedisProbe(vgw.redis.url);
    // Runs before gw.stop() (cleanups run newest first), so the connection never sees its server go away.
    cleanups.push(() => Promise.resolve(probe.close()));
    await probe.connect();
    const redisPid = await probe.pid();
    variants.push({
      name,
      describe: spec.describe,
      base: vgw.base,
      key: vgw.key,
      gateway: vgw,
      redisUrl: vgw.redis.url,
      redis: probe,
      pids() {
        const out: Record<string, number | undefined> = {};
        for (const p of vgw.stack.processes) out[p.name] = p.pid;
        out['envoy-bare'] = bareEnvoy.pid;
        out.redis = redisPid;
        return out;
      },
    });
  }
  const variant = (name: GatewayVariant): VariantTarget => {
    const v = variants.find((x) => x.name === name);
    if (!v) throw new Error(`bench: gateway variant ${name} was not started`);
    return v;
  };
  const envoys = [
    { label: 'envoy', proc: gatewayEnvoy },
    { label: 'envoy-bare', proc: bareEnvoy },
    { label: 'envoy-floor', proc: floor.envoy },
    ...(shaped ? [{ label: 'envoy-floor-shaped', proc: shaped.envoy }] : []),
    ...variants.map((v) => ({ label: `envoy(${v.name})`, proc: v.gateway.stack.process('envoy') })),
  ];

  return {
    envoyBin,
    envoyVersion: version,
    envoyConcurrency: concurrency,
    simulatorUrl: gw.stack.simulatorUrl,
    upstreamKey: gw.upstreamKey,
    bareUrl: `http://${bareHost}:${listenPort}`,
    floorUrl: floor.url,
    shapedFloorUrl: shaped?.url ?? null,
    gatewayBase: gw.base,
    gatewayKey: gw.key,
    gateway: gw,
    variants,
    variant,
    pids(name) {
      if (name) return variant(name).pids();
      const out: Record<string, number | undefined> = {};
      for (const p of gw.stack.processes) out[p.name] = p.pid;
      out['envoy-bare'] = bareEnvoy.pid;
      out['envoy-floor'] = floor.envoy.pid;
      out['null-sidecar'] = floor.sidecar.pid;
      return out;
    },
    envoyLines(url) {
      const origin = new URL(url).origin;
      const byOrigin: Array<[string, ManagedProcess]> = [
        [new URL(gw.base).origin, gatewayEnvoy],
        [new URL(`http://${bareHost}:${listenPort}`).origin, bareEnvoy],
        ...[floor, shaped].flatMap((f) => (f ? [[new URL(f.url).origin, f.envoy] as [string, ManagedProcess]] : [])),
        ...variants.map((v) => [new URL(v.base).origin, v.gateway.stack.process('envoy')] as [string, ManagedProcess]),
      ];
      const found = byOrigin.find(([o]) => o === origin);
      if (!found) throw new Error(`bench: no Envoy serves ${url}`);
      return found[1].lines;
    },
    envoyAdminFor(url) {
      const origin = new URL(url).origin;
      const admins: Array<[string, string]> = [
        [new URL(gw.base).origin, gw.stack.envoyAdminUrl],
        ...[floor, shaped].flatMap((f) => (f ? [[new URL(f.url).origin, f.admin] as [string, string]] : [])),
        ...variants.map((v) => [new URL(v.base).origin, v.gateway.stack.envoyAdminUrl] as [string, string]),
      ];
      return admins.find(([o]) => o === origin)?.[1] ?? null;
    },
    logs: () => [gw.stack.logs(), bareEnvoy.tail(200), ...variants.map((v) => `--- gateway ${v.name} ---\n${v.gateway.stack.logs()}`)].join('\n'),
    accessLogProblems() {
      const tally = new Map<string, number>();
      for (const { label, proc: p } of envoys) {
        for (const line of p.lines) {
          if (!line.startsWith('{')) continue;
          let e: Record<string, unknown>;
          try {
            e = JSON.parse(line) as Record<string, unknown>;
          } catch {
            continue;
          }
          const status = Number(e.status);
          if (status >= 200 && status < 300) continue;
          const k = `${label} ${status} ${String(e.flags)} ${String(e.details)}`;
          tally.set(k, (tally.get(k) ?? 0) + 1);
        }
      }
      return tally;
    },
  };
}

/** The gateway's run directory (where startStack wrote envoy.yaml): the sidecar socket's directory. */
function runDirOf(gw: TestGateway): string {
  const sock = gw.config.listen.sidecarGrpc;
  if (!sock.startsWith('unix:')) throw new Error(`bench: expected a unix sidecar socket, got ${sock}`);
  const dir = dirname(sock.slice('unix:'.length));
  // startGateway makes it with mkdtemp(tmpdir()/gw-test-), inside this run's directory; anything else is not ours to delete.
  if (!basename(dir).startsWith('gw-test-') || dirname(dir) !== benchRoot) throw new Error(`bench: unexpected gateway run directory ${dir}`);
  return dir;
}

/**
 * What the benchmark topology spawns: Envoy, the project's Node services, redis-server.
 * Other children (tsx's esbuild service) are not the benchmark's to end.
 */
const OURS = /(?:^|\/)envoy(?:\s|$)|sidecar\/(?:simulator|account|src)\/main\.ts|bench\/null-sidecar\.ts|redis-server/;

/** pids of live child processes of this process that belong to the topology (Linux /proc); empty elsewhere. */
function childPids(): number[] {
  const out: number[] = [];
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return out;
  }
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      // pid (comm) state ppid ... — comm may contain spaces and parentheses.
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(rest[1]) === process.pid && rest[0] !== 'Z' && OURS.test(cmdline(Number(e)))) out.push(Number(e));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim().slice(0, 200);
  } catch {
    return '?';
  }
}

/** SIGINT, then SIGKILL after graceMs, to children of this process still running; returns what it found. */
export async function reapChildren(graceMs = 3000): Promise<string[]> {
  const left = childPids();
  const found = left.map((pid) => `${pid} ${cmdline(pid)}`);
  for (const pid of left) {
    try {
      process.kill(pid, 'SIGINT');
    } catch {
      // already gone
    }
  }
  const until = Date.now() + graceMs;
  while (Date.now() < until && childPids().length > 0) await new Promise((r) => setTimeout(r, 50));
  for (const pid of childPids()) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  return found;
}

/**
 * On SIGINT/SIGTERM/SIGHUP: stop the targets (once; further signals during
 * cleanup are ignored), reap leftovers, exit 130. Returns a function that
 * removes the handlers.
 */
let interruptedBy: NodeJS.Signals | null = null;

/** The signal that interrupted the run, if any (failures after it are expected, not news). */
export function interrupted(): NodeJS.Signals | null {
  return interruptedBy;
}

export function installCleanupHandlers(): () => void {
  const handler = (sig: NodeJS.Signals) => {
    if (interruptedBy) return;
    interruptedBy = sig;
    process.stderr.write(`\nbench: ${sig}, stopping targets...\n`);
    const force = setTimeout(() => process.exit(130), 15_000);
    force.unref();
    void stopTargets()
      .then(() => reapChildren())
      .then(() => removeBenchRoot()) // again: a gateway half-way through its start-up had registered nothing
      .finally(() => process.exit(130));
  };
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  for (const s of signals) process.on(s, handler);
  return () => {
    for (const s of signals) process.off(s, handler);
  };
}
