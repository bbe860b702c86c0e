/**
 * A server-sent-events writer over a raw Node response. Each event is its own
 * network write, or with slice settings the text goes out in uneven slices
 * (slices.ts) that ignore event boundaries; waits (chunk delays, backpressure,
 * hangs) end early when the client goes away, so disconnects are noticed promptly.
 */
import type { ServerResponse } from 'node:http';
import { SlicedOutput, type SliceSettings } from './slices.js';
import { writeNow } from './write-now.js';

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  connection: 'keep-alive',
} as const;

/**
 * When a wait of ms that starts now should end, on the provider's own clock:
 * ms after the last wait was due (null: none yet, so ms from now), but at
 * least 1 ms from now (a stream that fell behind resumes its pace from here).
 */
export function nextDue(lastDue: number | null, now: number, ms: number): number {
  return Math.max((lastDue ?? now) + ms, now + 1);
}

export class SseWriter {
  /** The response or its connection has closed. */
  closed = false;
  /** We finished the response (end or kill); a close after this is not the client's doing. */
  endedByUs = false;
  private wake: (() => void) | null = null;
  private turns = 0;
  /** When the last delay was due (performance.now()); null before the first. */
  private due: number | null = null;
  private readonly sliced: SlicedOutput | null;

  constructor(
    private readonly res: ServerResponse,
    onClose: (byClient: boolean) => void,
    slices: SliceSettings | null = null,
  ) {
    this.sliced = slices ? new SlicedOutput(res, slices, () => this.closed) : null;
    res.once('close', () => {
      this.closed = true;
      this.wake?.();
      onClose(!this.endedByUs);
    });
  }

  start(): void {
    this.res.socket?.setNoDelay(true);
    this.res.writeHead(200, SSE_HEADERS);
  }

  /** Sends the status line and headers now, before any event. */
  flushHeaders(): void {
    this.res.flushHeaders();
  }

  /** Writes one event; false once the client is gone. */
  async send(event: string): Promise<boolean> {
    if (this.closed) return false;
    if (this.sliced) {
      this.sliced.push(event);
      return true;
    }
    const ok = writeNow(this.res, event);
    if (!ok) {
      await this.waitFor((resume) => {
        this.res.once('drain', resume);
        return () => this.res.off('drain', resume);
      });
    }
    return !this.closed;
  }

  /**
   * Waits ms; ends early on close. With 0 it yields to the event loop only
   * every 32 events (enough to notice disconnects on long streams) and
   * returns undefined otherwise, keeping zero-delay streams cheap.
   *
   * Delays keep the provider's own clock: each wait ends ms after the last one
   * was due, not ms after it actually ended, so a timer that fired late (the
   * machine busy with the gateway the stream goes through) does not push back
   * the rest of the stream. A stream that fell more than a delay behind (a
   * slow reader, a stalled machine) sends its next event 1 ms later and keeps
   * its pace from there, without a burst.
   */
  pause(ms: number): Promise<void> | undefined {
    if (ms <= 0 && ++this.turns % 32 !== 0) return undefined;
    if (ms > 0) {
      const now = performance.now();
      const due = nextDue(this.due, now, ms);
      this.due = due;
      return this.waitFor((resume) => {
        const t = setTimeout(resume, due - now);
        return () => clearTimeout(t);
      });
    }
    return this.waitFor((resume) => {
      const t = setImmediate(resume);
      return () => clearImmediate(t);
    });
  }

  /** Waits until the connection closes (the hang directive). */
  untilClosed(): Promise<void> {
    return this.waitFor(() => () => {});
  }

  end(last: string): void {
    this.endedByUs = true;
    if (this.sliced) this.sliced.end(last);
    else this.res.end(last);
  }

  /** Drops the connection mid-response. */
  kill(): void {
    this.endedByUs = true;
    this.res.destroy();
  }

  private waitFor(arm: (resume: () => void) => () => void): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise((resolve) => {
      let disarm: () => void = () => {};
      const resume = (): void => {
        disarm();
        this.wake = null;
        resolve();
      };
      this.wake = resume;
      disarm = arm(resume);
    });
  }
}
