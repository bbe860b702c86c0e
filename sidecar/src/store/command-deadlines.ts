import { Slots } from '../util/slots.js';
import { StoreUnavailableError } from './contract.js';

/**
 * The store's per-command timeout, kept without a timer per command: each
 * command under way holds a slot (util/slots.ts) with its deadline and how to
 * fail it, and one interval, running only while commands are
 * under way, fails those past their deadline. A command therefore gives up
 * between `timeoutMs` and `timeoutMs` plus one check interval (a tenth of it)
 * after it was sent.
 *
 * Why not ioredis's own `commandTimeout`: it arms a Node timer per command
 * and, on the reply, deletes the command's timer property, which turns every
 * command object into a dictionary; under load those timers and commands were
 * the second largest source of objects the garbage collector promoted
 * (docs/benchmark.md, session 18). The failure is the same: the command's
 * promise is rejected, the command itself stays in the client's queue until
 * its reply (ignored) or the connection's end. connectRedis watches each
 * store operation (one script, one pipeline, or the commands a listing sends
 * at once) where ioredis timed each command.
 */
export class CommandDeadlines {
  private readonly fails = new Slots<(err: Error) => void>();
  /** Each watched command's deadline, by its slot. */
  private readonly due: number[] = [];
  private timer: NodeJS.Timeout | null = null;
  /** How often the interval looks: a tenth of the timeout, at least every 5 ms. */
  readonly checkEveryMs: number;

  constructor(
    private readonly timeoutMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.checkEveryMs = Math.max(5, Math.ceil(timeoutMs / 10));
  }

  /** Commands being watched now. */
  get size(): number {
    return this.fails.size;
  }

  /** Watches a command sent now: `fail` runs (with a StoreUnavailableError) once its deadline has passed, unless done() came first. */
  watch(fail: (err: Error) => void): number {
    const slot = this.fails.add(fail);
    this.due[slot] = this.now() + this.timeoutMs;
    if (this.timer === null) {
      this.timer = setInterval(() => this.check(), this.checkEveryMs);
      this.timer.unref();
    }
    return slot;
  }

  /** The command answered (or failed) in time: its slot is freed. A slot failed or reused since is left alone. */
  done(slot: number, fail: (err: Error) => void): void {
    this.fails.delete(slot, fail);
  }

  /** Fails every command past its deadline; stops the interval once none is under way. */
  check(): void {
    if (this.fails.size === 0) {
      if (this.timer !== null) clearInterval(this.timer);
      this.timer = null;
      return;
    }
    const now = this.now();
    this.fails.forEach((fail, slot) => {
      if ((this.due[slot] as number) > now) return;
      this.fails.delete(slot, fail);
      // The store's error, so a promise's own reject can be the one watched (no wrapper per command).
      fail(new StoreUnavailableError(new Error('Command timed out')));
    });
  }
}
