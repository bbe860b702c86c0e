import { accessSync, constants, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { Config } from '../src/config/schema.js';
import { tlsFiles } from '../src/config/outbound-tls.js';
import { parseConfig } from '../src/config/load.js';
import { renderEnvoyConfig } from './envoy-config.js';
import { ManagedProcess, listeningLine } from './process.js';
import { REPO_ROOT } from './paths.js';
import { assertPortsFree, listenersOf } from './preflight.js';
import { SIDECAR_NODE_FLAGS } from './node-flags.js';

/**
 * The whole gateway as processes, in the order that matters: the upstream
 * simulator, the account service, the sidecar, then Envoy. Used by
 * `npm start`, the integration tests and the benchmark.
 */
export interface StackOptions {
  readonly config: Config;
  readonly envoyBin: string;
  readonly runDir: string;
  /** Start the bundled simulator on the upstream URL's port. */
  readonly simulator: boolean;
  readonly simulatorArgs?: readonly string[];
  /** Start the bundled payment simulator on accountService.paymentsUrl's port. */
  readonly paymentSimulator?: boolean;
  readonly echo?: boolean;
  readonly env?: NodeJS.ProcessEnv;
  readonly envoyLogLevel?: string;
  /** Extra node flags per service (e.g. { sidecar: ['--cpu-prof'] } for profiling). */
  readonly nodeArgs?: Readonly<Record<string, readonly string[]>>;
  /** Write each process's output to `<logDir>/<name>.log` (npm start: the run directory). */
  readonly logDir?: string;
  /**
   * Sidecar processes behind Envoy's one sidecar cluster (default 1; npm start: SIDECAR_PROCESSES).
   * More than one needs a shared store (Redis): the memory store lives inside one process.
   */
  readonly sidecars?: number;
}

export interface Stack {
  readonly config: Config;
  readonly gatewayUrl: string;
  readonly adminUrl: string;
  readonly adminToken: string;
  /** The configuration file the sidecar reads (GATEWAY_CONFIG): edit it and reload. */
  readonly configPath: string;
  /** Where the operator API token is kept (the CLI's ADMIN_TOKEN_FILE). */
  readonly adminTokenFile: string;
  readonly envoyAdminUrl: string;
  readonly simulatorUrl: string;
  /** The payment provider's base URL (null: none configured). */
  readonly paymentsUrl: string | null;
  readonly processes: ManagedProcess[];
  /** The sidecar processes: "sidecar" (gRPC at listen.sidecarGrpc, operator API at listen.admin), then "sidecar-2" … */
  readonly sidecars: ReadonlyArray<{ readonly process: ManagedProcess; readonly grpc: string; readonly adminUrl: string }>;
  process(name: string): ManagedProcess;
  /** Process name → its log file (empty without `logDir`). */
  readonly logFiles: Readonly<Record<string, string>>;
  /** Output of every process, for a failure report. */
  logs(): string;
  stop(): Promise<void>;
}

const TSX = ['--import', 'tsx'];
/** Access-log lines reach stdout within a second (Envoy's default is every 10 s). */
export const ENVOY_LOG_FLUSH = ['--file-flush-interval-msec', '1000'];

export async function startStack(opts: StackOptions): Promise<Stack> {
  const cfg = opts.config;
  mkdirSync(opts.runDir, { recursive: true });
  const env = { ...process.env, ...(opts.env ?? {}) };
  const processes: ManagedProcess[] = [];
  const logFiles: Record<string, string> = {};
  const logFile = (name: string) => {
    if (!opts.logDir) return undefined;
    mkdirSync(opts.logDir, { recursive: true });
    return (logFiles[name] = join(opts.logDir, `${name}.log`));
  };
  const spawnTs = (name: string, script: string, args: string[], extraEnv: NodeJS.ProcessEnv = {}, stopGraceMs?: number) => {
    // The sidecar's heap flags first: a flag in opts.nodeArgs (later on the command line) overrides them.
    const heapFlags = isSidecar(name) ? SIDECAR_NODE_FLAGS : [];
    const p = new ManagedProcess(name, process.execPath, [...heapFlags, ...(opts.nodeArgs?.[name] ?? []), ...TSX, join(REPO_ROOT, script), ...args], {
      env: { ...env, ...extraEnv },
      cwd: REPO_ROOT,
      echo: opts.echo,
      stopGraceMs,
      logFile: logFile(name),
    });
    processes.push(p);
    return p;
  };
  const envoyAdminUrl = `http://${cfg.listen.envoyAdmin.host}:${cfg.listen.envoyAdmin.port}`;
  /**
   * A stop that loses nothing: Envoy's listeners drain first (new requests are
   * discouraged: `Connection: close`, HTTP/2 GOAWAY), the sidecar drains its
   * exchanges (SIGINT; up to shutdown.drainSeconds) while Envoy still carries
   * them, then Envoy stops, then the services behind it.
   */
  const stopAll = async () => {
    const byName = (n: string) => processes.find((p) => p.name === n);
    const envoy = byName('envoy');
    if (envoy?.running) await fetch(`${envoyAdminUrl}/drain_listeners?graceful`, { method: 'POST' }).catch(() => undefined);
    await Promise.all(processes.filter((p) => isSidecar(p.name)).map((p) => p.stop()));
    await envoy?.stop();
    for (const p of [...processes].reverse()) await p.stop();
  };

  try {
    const sidecarCount = opts.sidecars ?? 1;
    assertSidecarCount(cfg, sidecarCount);
    const upstream = new URL(cfg.upstream.baseUrl);
    requireUpstreamTlsFiles(cfg);
    await assertPortsFree(listenersOf(cfg, opts.simulator));
    if (opts.simulator) {
      // "localhost": Envoy resolves it to 127.0.0.1 (V4_PREFERRED), so the simulator listens there.
      const simHost = upstream.hostname === 'localhost' ? '127.0.0.1' : upstream.hostname;
      const simPort = upstream.port || (upstream.protocol === 'https:' ? '443' : '80');
      const sim = spawnTs('simulator', 'sidecar/simulator/main.ts', ['--host', simHost, '--port', simPort, ...(opts.simulatorArgs ?? [])]);
      await sim.waitForLine(listeningLine, 20_000);
    }
    if (opts.paymentSimulator && cfg.accountService.paymentsUrl) {
      const pay = new URL(cfg.accountService.paymentsUrl);
      const payments = spawnTs('payments', 'sidecar/payments/main.ts', ['--host', pay.hostname, '--port', pay.port || '80']);
      await payments.waitForLine(listeningLine, 20_000);
    }
    const configPath = join(opts.runDir, 'gateway.yaml');
    writeFileSync(configPath, stringify(cfg));
    // With Redis the account service is its own process; with the memory store the sidecar serves it (shared memory).
    if (cfg.store.kind === 'redis') {
      const acct = spawnTs('account', 'sidecar/account/main.ts', [], { GATEWAY_CONFIG: configPath });
      await acct.waitForLine(listeningLine, 20_000);
    }

    const tokenFile = join(opts.runDir, 'admin-token');
    // SIGKILL only well after the drain deadline: the sidecar settles and closes its stores first.
    const sidecarGraceMs = cfg.shutdown.drainSeconds * 1000 + 15_000;
    const spawnSidecar = async (i: number) => {
      // The first as configured; each other one its own socket (or port), operator API port (any free one) and journal.
      const grpc = nthSidecarAddress(cfg.listen.sidecarGrpc, i);
      const own = i === 0 ? {} : { SIDECAR_GRPC: grpc, ADMIN_PORT: '0', SETTLEMENT_JOURNAL: nthFile(cfg.billing.journalPath, i) };
      const name = i === 0 ? 'sidecar' : `sidecar-${i + 1}`;
      const p = spawnTs(name, 'sidecar/src/main.ts', [], { GATEWAY_CONFIG: configPath, ADMIN_TOKEN_FILE: tokenFile, ...own }, sidecarGraceMs);
      const ready = await p.waitForLine(listeningLine, 20_000);
      // A TCP address on port 0: the port it got.
      const bound = grpc.startsWith('unix:') ? grpc : `${grpc.slice(0, grpc.lastIndexOf(':'))}:${String(ready.grpcPort)}`;
      return { process: p, grpc: bound, adminUrl: `http://${loopbackFor(cfg.listen.admin.host)}:${String(ready.adminPort)}` };
    };
    // The first writes the operator token file the others read.
    const first = await spawnSidecar(0);
    const sidecars = [first, ...(await Promise.all(Array.from({ length: sidecarCount - 1 }, (_, i) => spawnSidecar(i + 1))))];

    const envoyPath = join(opts.runDir, 'envoy.yaml');
    writeFileSync(envoyPath, renderEnvoyConfig(cfg, { sidecarAddresses: sidecars.map((x) => x.grpc) }));
    const envoyArgs = [
      '-c', envoyPath, '--log-level', opts.envoyLogLevel ?? 'warn',
      '--use-dynamic-base-id', // a free base id: stacks run side by side
      '--concurrency', '2',
      // drain_listeners?graceful (on stop) discourages every new request at once, for as long as the sidecar drains.
      '--drain-strategy', 'immediate', '--drain-time-s', String(Math.max(1, Math.ceil(cfg.shutdown.drainSeconds))),
      ...ENVOY_LOG_FLUSH,
    ];
    const envoy = new ManagedProcess('envoy', opts.envoyBin, envoyArgs, { env, echo: opts.echo, logFile: logFile('envoy') });
    processes.push(envoy);
    await envoy.waitForLive(`${envoyAdminUrl}/ready`, 20_000);

    const adminUrl = `http://${cfg.listen.admin.host}:${cfg.listen.admin.port}`;
    const hostForUrl = loopbackFor(cfg.listen.gateway.host);
    return {
      config: cfg,
      gatewayUrl: `http://${hostForUrl}:${cfg.listen.gateway.port}`,
      adminUrl,
      adminToken: readFileSync(tokenFile, 'utf8').trim(),
      configPath,
      adminTokenFile: tokenFile,
      envoyAdminUrl,
      simulatorUrl: `${upstream.protocol}//${upstream.host}`,
      paymentsUrl: cfg.accountService.paymentsUrl,
      processes,
      sidecars,
      logFiles,
      process(name) {
        const p = processes.find((x) => x.name === name);
        if (!p) throw new Error(`no process ${name}`);
        return p;
      },
      logs: () => processes.map((p) => p.tail(200)).join('\n'),
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

const isSidecar = (name: string) => name === 'sidecar' || name.startsWith('sidecar-');
const loopbackFor = (host: string) => (['0.0.0.0', '::'].includes(host) ? '127.0.0.1' : host);

/** Several sidecar processes share one store; the memory store lives inside one process, so it cannot. */
export function assertSidecarCount(cfg: Config, n: number): void {
  if (!Number.isInteger(n) || n < 1 || n > 64) throw new Error(`sidecar processes: ${n} is not a whole number from 1 to 64`);
  if (n > 1 && cfg.store.kind === 'memory') {
    throw new Error(`sidecar processes: ${n} need a shared store, and the memory store lives inside one process; use Redis (store.kind: redis, or REDIS_URL)`);
  }
}

/** The i-th sidecar's gRPC address (0: as configured): unix:/x/sidecar.sock → unix:/x/sidecar-2.sock; host:port → host:(port+i). */
export function nthSidecarAddress(address: string, i: number): string {
  if (i === 0) return address;
  if (address.startsWith('unix:')) return `unix:${nthFile(address.slice('unix:'.length), i)}`;
  const colon = address.lastIndexOf(':');
  const port = Number(address.slice(colon + 1));
  if (port === 0) return address; // any free port, each its own
  return `${address.slice(0, colon)}:${port + i}`;
}

/** /x/name.ext → /x/name-<i+1>.ext (0: unchanged). */
function nthFile(path: string, i: number): string {
  if (i === 0) return path;
  const m = /^(.*?)(\.[^./]*)?$/.exec(path) as RegExpExecArray;
  return `${m[1]}-${i + 1}${m[2] ?? ''}`;
}

/**
 * Envoy reads the TLS files of its https clusters (the provider, the account
 * service) itself and, when one is missing, fails with a message about its
 * bootstrap; say which setting names a missing file instead.
 */
export function requireUpstreamTlsFiles(cfg: Config): void {
  const clusters = [
    { url: cfg.upstream.baseUrl, tls: cfg.upstream.tls, setting: 'upstream.tls' },
    { url: cfg.accountService.url, tls: cfg.accountService.tls, setting: 'accountService.tls' },
  ];
  for (const { url, tls, setting } of clusters) {
    if (!url.startsWith('https:')) continue;
    for (const { key, file } of tlsFiles(tls)) {
      try {
        accessSync(file, constants.R_OK);
      } catch {
        throw new Error(`${setting}.${key}: cannot read ${file}`);
      }
    }
  }
}

/** A config with every listener moved to the given ports (the rest as given). */
export function withPorts(
  cfg: Config,
  ports: { gateway: number; envoyAdmin: number; admin: number; simulator: number; account: number; payments?: number },
  sidecarGrpc: string,
): Config {
  const raw = JSON.parse(JSON.stringify(cfg)) as Record<string, any>;
  raw.listen.gateway.port = ports.gateway;
  raw.listen.envoyAdmin.port = ports.envoyAdmin;
  raw.listen.admin.port = ports.admin;
  raw.listen.sidecarGrpc = sidecarGrpc;
  const up = new URL(raw.upstream.baseUrl);
  if (up.hostname === '127.0.0.1' || up.hostname === 'localhost') {
    up.port = String(ports.simulator);
    raw.upstream.baseUrl = up.toString().replace(/\/$/, '');
  }
  raw.accountService.url = `http://127.0.0.1:${ports.account}`;
  if (ports.payments !== undefined && raw.accountService.paymentsUrl) raw.accountService.paymentsUrl = `http://127.0.0.1:${ports.payments}`;
  return parseConfig(raw);
}
