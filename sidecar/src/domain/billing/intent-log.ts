import { closeSync, ftruncateSync, openSync, readdirSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

/** Where an intent was written: the segment that must outlive it. */
export type IntentMark = number;

/**
 * A segment holds at most this many bytes (about 250 settlements): full, with
 * intents still open in it, it is closed and a new one begun.
 */
export const INTENT_SEGMENT_BYTES = 64 * 1024;

/**
 * The open segment is emptied in place whenever nothing in it is open and it holds
 * this many bytes (about 20 settlements): one ftruncate(2) per twenty settlements at
 * most, and a restart after a crash re-sends few that were written already
 * (harmless: idempotent).
 */
export const INTENT_EMPTY_BYTES = 4 * 1024;

interface Segment {
  readonly n: number;
  readonly path: string;
  readonly fd: number;
  bytes: number;
  /** Intents written to it and not yet done. */
  open: number;
}

/**
 * A write-ahead log of lines that must survive a crash of this process until
 * they are marked done: one line per intent, appended with one write(2) to a
 * segment file kept open (`<base>.<n>`). The kernel keeps what was written
 * when the process dies (kill -9, an out-of-memory kill); a power loss can
 * take the last lines, as it can the socket write they stand in for.
 *
 * Segments do not grow without bound: the open one is emptied in place when
 * nothing in it is open and it holds INTENT_EMPTY_BYTES; one that reaches
 * INTENT_SEGMENT_BYTES with intents open is closed and a new one begun; a
 * closed segment is deleted when its last intent is done. What a previous life of the process left is read back with
 * `recover` (before the first `record`), then `forget` deletes it.
 */
export class IntentLog {
  private current: Segment | null = null;
  private readonly closed = new Map<number, Segment>();
  private readonly emptyBytes: number;

  constructor(
    private readonly base: string,
    private readonly segmentBytes = INTENT_SEGMENT_BYTES,
    /** The write(2) of one line: bytes written (a test stands in a failing disk). */
    private readonly write: (fd: number, text: string) => number = writeSync,
  ) {
    this.emptyBytes = Math.min(INTENT_EMPTY_BYTES, segmentBytes);
  }

  /** Appends one line (no newline in it) at once; throws if it could not be written. */
  record(line: string): IntentMark {
    // Full, so something in it is open (`done` empties a full segment once nothing is).
    if (this.current && this.current.bytes >= this.segmentBytes) this.retire(this.current);
    const s = this.current ?? (this.current = this.begin());
    const text = `${line}\n`;
    const bytes = Buffer.byteLength(text);
    let written = -1;
    try {
      written = this.write(s.fd, text);
    } finally {
      // A failed or short write (a full disk) may leave a fragment: no later line may follow it.
      if (written !== bytes) this.retire(s);
    }
    if (written !== bytes) throw new Error('intent log: short write');
    s.bytes += bytes;
    s.open += 1;
    return s.n;
  }

  /** The current segment takes no more lines: kept while intents in it are open, deleted if none. */
  private retire(s: Segment): void {
    closeSync(s.fd);
    this.current = null;
    if (s.open > 0) this.closed.set(s.n, s);
    else unlinkQuietly(s.path);
  }

  /** The intent written at `mark` is carried out (or safe elsewhere): its segment may go. */
  done(mark: IntentMark): void {
    const s = this.current?.n === mark ? this.current : this.closed.get(mark);
    if (!s || s.open === 0) return;
    s.open -= 1;
    if (s.open > 0) return;
    if (s === this.current) {
      if (s.bytes >= this.emptyBytes) this.empty(s);
    } else {
      this.closed.delete(s.n);
      unlinkQuietly(s.path);
    }
  }

  /** Intents written and not yet done, in every segment of this life. */
  get pending(): number {
    let n = this.current?.open ?? 0;
    for (const s of this.closed.values()) n += s.open;
    return n;
  }

  /**
   * The lines of every segment on disk that this life did not write (a previous
   * life's, never marked done), oldest segment first. A torn last line (the
   * process died inside a write) is left out: that write never completed.
   */
  recover(): string[] {
    const lines: string[] = [];
    for (const { path } of this.onDisk()) {
      if (this.isOurs(path)) continue;
      const text = readFileSync(path, 'utf8');
      // Up to the last newline: a write the process died inside has none after it.
      for (const line of text.slice(0, text.lastIndexOf('\n') + 1).split('\n')) if (line) lines.push(line);
    }
    return lines;
  }

  /** Deletes the segments `recover` read (call once their lines are safe elsewhere). */
  forget(): void {
    for (const { path } of this.onDisk()) if (!this.isOurs(path)) unlinkQuietly(path);
  }

  /** Closes the open segment; a log with nothing open leaves no file behind. */
  close(): void {
    if (this.current) this.retire(this.current);
  }

  private isOurs(path: string): boolean {
    return this.current?.path === path || [...this.closed.values()].some((s) => s.path === path);
  }

  private begin(): Segment {
    // Past every number on disk: a previous life's segment waits for `recover`.
    const n = this.onDisk().reduce((next, f) => Math.max(next, f.n + 1), 0);
    const path = `${this.base}.${n}`;
    return { n, path, fd: openSync(path, 'a', 0o600), bytes: 0, open: 0 };
  }

  private empty(s: Segment): void {
    ftruncateSync(s.fd, 0);
    s.bytes = 0;
  }

  private onDisk(): { n: number; path: string }[] {
    const dir = dirname(this.base);
    const prefix = `${basename(this.base)}.`;
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      return [];
    }
    return names
      .filter((f) => f.startsWith(prefix) && /^\d+$/.test(f.slice(prefix.length)))
      .map((f) => ({ n: Number(f.slice(prefix.length)), path: join(dir, f) }))
      .sort((a, b) => a.n - b.n);
  }
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // Already gone.
  }
}
