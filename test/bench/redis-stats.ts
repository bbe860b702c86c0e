/**
 * Redis side of the benchmark: `INFO commandstats` (calls per command), the
 * server's pid, and MONITOR to tell the commands clients send (one round trip
 * each, unless pipelined) from those Lua scripts run inside EVAL/EVALSHA —
 * commandstats counts both alike.
 */
import { Redis } from 'ioredis';

/** Command name (lower case) -> calls since the server started. */
export type CommandCalls = Map<string, number>;

/** Parses `cmdstat_<name>:calls=N,usec=...` lines of INFO commandstats. */
export function parseCommandStats(info: string): CommandCalls {
  const out: CommandCalls = new Map();
  for (const line of info.split(/\r?\n/)) {
    const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line);
    if (m) out.set(m[1]!.toLowerCase(), Number(m[2]));
  }
  return out;
}

/** after - before per command, zero differences left out. */
export function diffCalls(before: CommandCalls, after: CommandCalls): CommandCalls {
  const out: CommandCalls = new Map();
  for (const [cmd, n] of after) {
    const d = n - (before.get(cmd) ?? 0);
    if (d !== 0) out.set(cmd, d);
  }
  return out;
}

/** Commands the probe itself sends; not the gateway's. */
const OWN = new Set(['info', 'client', 'hello', 'ping', 'select', 'monitor', 'echo']);

export interface MonitoredCalls {
  /** Sent by a client connection (the gateway's sidecar): one round trip each unless pipelined. */
  readonly client: CommandCalls;
  /** Run by a Lua script (redis.call inside EVAL/EVALSHA/FCALL): no round trip of their own. */
  readonly script: CommandCalls;
}

const bump = (m: CommandCalls, k: string) => m.set(k, (m.get(k) ?? 0) + 1);

export class RedisProbe {
  private readonly redis: Redis;

  constructor(url: string) {
    // No retries: the benchmark stops this server itself, a reconnect loop would only keep the process alive.
    this.redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false });
  }

  async connect(): Promise<void> {
    await this.redis.connect();
  }

  /** Calls per command, without the probe's own commands (INFO, CLIENT, HELLO, PING, SELECT). */
  async commandCalls(): Promise<CommandCalls> {
    const all = parseCommandStats(await this.redis.info('commandstats'));
    for (const k of OWN) all.delete(k);
    return all;
  }

  /**
   * MONITOR on a connection of its own until stop(), which first waits until
   * the monitor has seen a marker sent after everything it must count.
   */
  async monitor(): Promise<{ stop(): Promise<MonitoredCalls> }> {
    const m = await this.redis.monitor();
    const client: CommandCalls = new Map();
    const script: CommandCalls = new Map();
    const marker = `bench-marker-${process.pid}-${Date.now()}`;
    let sawMarker: (() => void) | null = null;
    m.on('monitor', (_time: string, args: string[], source: string) => {
      const cmd = String(args[0] ?? '').toLowerCase();
      if (cmd === 'echo' && args[1] === marker) sawMarker?.();
      if (OWN.has(cmd)) return;
      bump(source === 'lua' ? script : client, cmd);
    });
    return {
      stop: async () => {
        try {
          const seen = new Promise<void>((resolve, reject) => {
            const timer = setTimeout(() => reject(new Error('redis MONITOR: marker not seen within 5 s')), 5_000);
            sawMarker = () => {
              clearTimeout(timer);
              resolve();
            };
          });
          await this.redis.echo(marker);
          await seen;
        } finally {
          m.disconnect();
        }
        return { client, script };
      },
    };
  }

  /** The server's process id (INFO server). */
  async pid(): Promise<number | undefined> {
    const m = /^process_id:(\d+)/m.exec(await this.redis.info('server'));
    return m ? Number(m[1]) : undefined;
  }

  close(): void {
    this.redis.disconnect();
  }
}
