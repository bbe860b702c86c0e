import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';

/**
 * A child process of the local stack: output kept in a ring buffer (shown
 * only when something fails, or echoed live) and, when `logFile` is given,
 * written to that file as well; readiness by a predicate on its output lines,
 * SIGINT then SIGKILL (after a grace period) on stop.
 */
/** Children still running: killed if the launcher exits without stopping them. */
const live = new Set<ChildProcess>();
let exitHook = false;

/** Kills `child` (SIGKILL) if this process exits while it still runs: children outlive a launcher otherwise. */
export function killOnExit(child: ChildProcess): void {
  live.add(child);
  child.once('exit', () => live.delete(child));
  if (exitHook) return;
  exitHook = true;
  process.once('exit', () => {
    for (const c of live) c.kill('SIGKILL');
  });
}

export class ManagedProcess {
  readonly lines: string[] = [];
  private child!: ChildProcess;
  private exited!: Promise<number | null>;
  private readyWaiters: Array<(line: string) => boolean> = [];
  private log: WriteStream | null = null;

  constructor(
    readonly name: string,
    private readonly cmd: string,
    private readonly args: readonly string[],
    private readonly opts: {
      env?: NodeJS.ProcessEnv;
      cwd?: string;
      echo?: boolean;
      keep?: number;
      /** How long stop() waits after SIGINT before SIGKILL (a sidecar drains its exchanges first). */
      stopGraceMs?: number;
      /** Also write every output line to this file (npm start: the run directory's logs/). */
      logFile?: string;
    },
  ) {
    // Truncated per start: the file holds this run's output (a restart appends to it).
    if (opts.logFile) this.log = createWriteStream(opts.logFile, { flags: 'w' });
    this.launch();
  }

  /** Stops the process (if running) and starts it again with the same command; output so far is cleared. */
  async restart(): Promise<void> {
    await this.stop();
    this.lines.length = 0;
    if (this.opts.logFile) this.log = createWriteStream(this.opts.logFile, { flags: 'a' });
    this.launch();
  }

  private launch(): void {
    const { name, opts } = this;
    // Its own process group: a terminal's Ctrl-C reaches only the launcher, which then
    // stops the children in order (Envoy's listeners drain while the sidecar drains).
    this.child = spawn(this.cmd, this.args, { env: opts.env ?? process.env, cwd: opts.cwd, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    killOnExit(this.child);
    const keep = opts.keep ?? 2000;
    const keepLine = (line: string) => {
      if (!line) return;
      this.lines.push(line);
      if (this.lines.length > keep) this.lines.shift();
      this.log?.write(`${line}\n`);
      if (opts.echo) process.stdout.write(`[${name}] ${line}\n`);
      this.readyWaiters = this.readyWaiters.filter((w) => !w(line));
    };
    // Output chunks are not line boundaries: keep the unfinished tail of each stream.
    const splitter = () => {
      let tail = '';
      return (buf: Buffer) => {
        const parts = (tail + buf.toString('utf8')).split('\n');
        tail = parts.pop() ?? '';
        for (const line of parts) keepLine(line);
      };
    };
    const onStdout = splitter();
    const onStderr = splitter();
    this.child.stdout?.on('data', onStdout);
    this.child.stderr?.on('data', onStderr);
    this.exited = new Promise((resolve) => this.child.once('exit', (code) => resolve(code)));
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Calls `listener` with every output line from now on, until the returned function is called. */
  watchLines(listener: (line: string) => void): () => void {
    let on = true;
    this.readyWaiters.push((line) => {
      if (on) listener(line);
      return !on;
    });
    return () => {
      on = false;
    };
  }

  /** Resolves with the first output line for which `match` returns a value. */
  waitForLine<T>(match: (line: string) => T | undefined, timeoutMs: number): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${this.name} not ready after ${timeoutMs} ms\n${this.tail()}`)), timeoutMs);
      void this.exited.then((code) => {
        clearTimeout(timer);
        reject(new Error(`${this.name} exited (${code}) before it was ready\n${this.tail()}`));
      });
      for (const line of this.lines) {
        const v = match(line);
        if (v !== undefined) {
          clearTimeout(timer);
          resolve(v);
          return;
        }
      }
      this.readyWaiters.push((line) => {
        const v = match(line);
        if (v === undefined) return false;
        clearTimeout(timer);
        resolve(v);
        return true;
      });
    });
  }

  /**
   * Polls an HTTP URL (an Envoy admin `/ready`) until it answers 200 `LIVE`;
   * fails at once, with this process's output, if the process exits first.
   */
  async waitForLive(url: string, timeoutMs: number): Promise<void> {
    const until = Date.now() + timeoutMs;
    let last = '';
    while (Date.now() < until) {
      if (!this.running) throw new Error(`${this.name} exited before it was ready\n${this.tail()}`);
      try {
        const res = await fetch(url);
        const body = await res.text();
        if (res.status === 200 && body.trim() === 'LIVE') return;
        last = `${res.status} ${body.slice(0, 80)}`;
      } catch (err) {
        last = (err as Error).message;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`${url} not ready after ${timeoutMs} ms (${last})\n${this.tail()}`);
  }

  /** The file this process's output goes to, if any. */
  get logFile(): string | undefined {
    return this.opts.logFile;
  }

  tail(n = 60): string {
    return this.lines.slice(-n).map((l) => `  [${this.name}] ${l}`).join('\n');
  }

  signal(sig: NodeJS.Signals): void {
    if (this.running) this.child.kill(sig);
  }

  /** Resolves when the process has exited (at once if it is not running). */
  exitedNow(): Promise<number | null> {
    return this.running ? this.exited : Promise.resolve(this.child.exitCode);
  }

  async stop(graceMs = this.opts.stopGraceMs ?? 3000): Promise<void> {
    if (this.running) {
      this.child.kill('SIGINT');
      const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
      await this.exited;
      clearTimeout(timer);
    }
    await this.closeLog();
  }

  private closeLog(): Promise<void> {
    const log = this.log;
    this.log = null;
    return log ? new Promise((resolve) => log.end(resolve)) : Promise.resolve();
  }
}

/** Parses a `{"event":"listening",...}` line printed by the project's services. */
export function listeningLine(line: string): Record<string, unknown> | undefined {
  if (!line.startsWith('{"event":"listening"')) return undefined;
  try {
    return JSON.parse(line) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}
