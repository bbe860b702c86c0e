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
    const p = new ManagedProcess(name, process.execPath, [...(opts.nodeArgs?.[name] ?? []), ...TSX, join(REPO_ROOT, script), ...args], {
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
    await byName('sidecar')?.stop();
    await envoy?.stop();
    for (const p of [...processes].reverse()) await p.stop();
  };

  try {
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
    const sidecar = spawnTs('sidecar', 'sidecar/src/main.ts', [], { GATEWAY_CONFIG: configPath, ADMIN_TOKEN_FILE: tokenFile }, sidecarGraceMs);
    await sidecar.waitForLine(listeningLine, 20_000);

    const envoyPath = join(opts.runDir, 'envoy.yaml');
    writeFileSync(envoyPath, renderEnvoyConfig(cfg));
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
    const hostForUrl = ['0.0.0.0', '::'].includes(cfg.listen.gateway.host) ? '127.0.0.1' : cfg.listen.gateway.host;
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

/**
 * Envoy reads the provider's TLS files itself and, when one is missing, fails
 * with a message about its bootstrap; say which setting names a missing file instead.
 */
function requireUpstreamTlsFiles(cfg: Config): void {
  if (!cfg.upstream.baseUrl.startsWith('https:')) return;
  for (const { key, file } of tlsFiles(cfg.upstream.tls)) {
    try {
      accessSync(file, constants.R_OK);
    } catch {
      throw new Error(`upstream.tls.${key}: cannot read ${file}`);
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
