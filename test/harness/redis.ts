/**
 * Test harness: a private redis-server process per call to startRedis().
 *
 * Never touches a shared Redis (e.g. the one on 6379): each server gets its
 * own free port, binds 127.0.0.1 only, persists nothing (`--save ""`,
 * `--appendonly no`; or, asked to be persistent, an append-only file synced
 * on every write) and runs in its own temporary directory. If redis-server
 * is not on PATH, startRedis() throws — tests needing Redis never skip.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { accessSync, constants, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { freePort } from './ports.js';
import { killOnExit } from '../../sidecar/stack/process.js';

export interface RedisServer {
  readonly url: string;
  readonly port: number;
  /** Graceful stop (SIGTERM, then SIGKILL); idempotent. Removes the temp dir. */
  stop(): Promise<void>;
  /** SIGSTOP: the port stays open but nothing answers (commands time out). */
  pause(): Promise<void>;
  /** SIGCONT after pause(). */
  resume(): Promise<void>;
  /** SIGKILL: connections drop, new ones are refused. */
  kill(): Promise<void>;
  /** Kills the current process if any, then starts a fresh one on the same port (empty unless persistent). */
  restart(): Promise<void>;
}

const START_TIMEOUT_MS = 10_000;
export const START_ATTEMPTS = 5;


export function findRedisServer(): string {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir === '') continue;
    const candidate = join(dir, 'redis-server');
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  throw new Error(
    'redis-server not found on PATH. Install it (Debian/Ubuntu: `apt-get install redis-server`, ' +
      'macOS: `brew install redis`); the Redis tests need a real server and do not skip.',
  );
}

export function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

export function waitExit(child: ChildProcess): Promise<void> {
  if (exited(child)) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** One raw PING; resolves true on +PONG, false on anything else or timeout. */
function pingOnce(port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    let buffer = '';
    const finish = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => finish(false));
    socket.once('error', () => finish(false));
    socket.on('data', (chunk) => {
      buffer += chunk.toString('latin1');
      if (buffer.includes('\r\n')) finish(buffer.startsWith('+PONG'));
    });
    socket.connect(port, '127.0.0.1', () => socket.write('PING\r\n'));
  });
}

export class Instance {
  readonly output: string[] = [];
  constructor(readonly child: ChildProcess) {
    const keep = (chunk: Buffer): void => {
      this.output.push(chunk.toString());
      if (this.output.length > 50) this.output.shift();
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    killOnExit(child);
  }
  text(): string {
    return this.output.join('').trim();
  }
}

/**
 * TLS only (no plain port): the server's certificate and key, the CA its
 * clients' certificates must chain to, and whether clients must present one.
 */
export interface RedisTlsOptions {
  readonly certFile: string;
  readonly keyFile: string;
  readonly caFile: string;
  readonly requireClientCert: boolean;
}

export interface RedisStartOptions {
  readonly tls?: RedisTlsOptions;
  /** ACL: this user with this password and every right; the default user is switched off. */
  readonly user?: { readonly name: string; readonly password: string };
  /** Keeps its data across restarts (append-only file, fsync on every write). */
  readonly persistent?: boolean;
  /** More redis-server arguments (e.g. cluster mode). */
  readonly extraArgs?: readonly string[];
}

function portArgs(port: number, tls: RedisTlsOptions | undefined): string[] {
  if (!tls) return ['--port', String(port)];
  return ['--port', '0', '--tls-port', String(port), '--tls-cert-file', tls.certFile, '--tls-key-file', tls.keyFile,
    '--tls-ca-cert-file', tls.caFile, '--tls-auth-clients', tls.requireClientCert ? 'yes' : 'no'];
}

export function spawnRedis(bin: string, port: number, dir: string, opts: RedisStartOptions = {}): Instance {
  const child = spawn(
    bin,
    [
      // A config file from stdin ("-") carries the ACL users: no password on the command line.
      ...(opts.user ? ['-'] : []),
      ...portArgs(port, opts.tls),
      '--bind', '127.0.0.1',
      '--save', '',
      // Persistent: every write in the append-only file before it is acknowledged (survives kill -9).
      ...(opts.persistent ? ['--appendonly', 'yes', '--appendfsync', 'always'] : ['--appendonly', 'no']),
      '--daemonize', 'no',
      '--dir', dir,
      ...(opts.extraArgs ?? []),
    ],
    { stdio: [opts.user ? 'pipe' : 'ignore', 'pipe', 'pipe'] },
  );
  if (opts.user) child.stdin?.end(`user default off\nuser ${opts.user.name} on >${opts.user.password} ~* &* +@all\n`);
  child.once('error', () => {}); // spawn failures show up as exit + output
  return new Instance(child);
}

/**
 * Waits for PONG (or, for a TLS or ACL server that a raw PING cannot reach, its
 * "Ready to accept connections" line); throws (after killing it) if the
 * process exits or never answers.
 */
export async function waitReady(instance: Instance, port: number, plainPing = true): Promise<void> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (exited(instance.child)) {
      throw new Error(`redis-server on port ${port} exited during startup:\n${instance.text()}`);
    }
    if (plainPing ? await pingOnce(port, 500) : instance.text().includes('Ready to accept connections')) return;
    await sleep(20);
  }
  instance.child.kill('SIGKILL');
  await waitExit(instance.child);
  throw new Error(`redis-server on port ${port} did not answer PING within ${START_TIMEOUT_MS} ms:\n${instance.text()}`);
}

export async function startRedis(opts: RedisStartOptions = {}): Promise<RedisServer> {
  const plainPing = !opts.tls && !opts.user;
  const bin = findRedisServer();
  const dir = mkdtempSync(join(tmpdir(), 'store-test-redis-'));

  let port = 0;
  let current: Instance | null = null;
  for (let attempt = 1; current === null; attempt++) {
    port = await freePort();
    const instance = spawnRedis(bin, port, dir, opts);
    try {
      await waitReady(instance, port, plainPing);
      current = instance;
    } catch (err) {
      // Lost the race for the port to another process: try another one.
      if (attempt < START_ATTEMPTS && /in use/i.test(instance.text())) continue;
      rmSync(dir, { recursive: true, force: true });
      throw err;
    }
  }

  let instance: Instance | null = current;
  let paused = false;

  async function signalAndWait(signal: NodeJS.Signals): Promise<void> {
    const target = instance;
    if (target === null || exited(target.child)) return;
    target.child.kill(signal);
    await waitExit(target.child);
  }

  return {
    url: `${opts.tls ? 'rediss' : 'redis'}://127.0.0.1:${port}`,
    port,

    async stop() {
      const target = instance;
      if (target !== null && !exited(target.child)) {
        if (paused) target.child.kill('SIGCONT');
        target.child.kill('SIGTERM');
        const timer = setTimeout(() => target.child.kill('SIGKILL'), 5_000);
        await waitExit(target.child);
        clearTimeout(timer);
      }
      paused = false;
      instance = null;
      rmSync(dir, { recursive: true, force: true });
    },

    async pause() {
      if (instance === null || exited(instance.child)) throw new Error('redis-server is not running');
      instance.child.kill('SIGSTOP');
      paused = true;
    },

    async resume() {
      if (instance === null || exited(instance.child)) throw new Error('redis-server is not running');
      instance.child.kill('SIGCONT');
      paused = false;
    },

    async kill() {
      await signalAndWait('SIGKILL'); // SIGKILL also ends a stopped (paused) process
      paused = false;
    },

    async restart() {
      await signalAndWait('SIGKILL');
      paused = false;
      mkdirSync(dir, { recursive: true }); // in case stop() removed it
      const next = spawnRedis(bin, port, dir, opts);
      instance = next;
      await waitReady(next, port, plainPing);
    },
  };
}

/**
 * Every key and every value in a Redis database as text (strings, hashes,
 * lists, sets, sorted sets and streams), for tests that assert something is
 * stored nowhere.
 */
export async function dumpRedis(url: string): Promise<string> {
  const { Redis } = await import('ioredis');
  const r = new Redis(url);
  try {
    const lines: string[] = [];
    for (const k of await r.keys('*')) {
      const type = await r.type(k);
      const value =
        type === 'string' ? await r.get(k)
        : type === 'hash' ? await r.hgetall(k)
        : type === 'list' ? await r.lrange(k, 0, -1)
        : type === 'set' ? await r.smembers(k)
        : type === 'zset' ? await r.zrange(k, '0', '-1', 'WITHSCORES')
        : type === 'stream' ? await r.xrange(k, '-', '+')
        : `(${type})`;
      lines.push(`${k} ${JSON.stringify(value)}`);
    }
    return lines.join('\n');
  } finally {
    r.disconnect();
  }
}
