/**
 * Sliced stream output, the way real providers write: the SSE text is cut
 * into uneven slices of 1 to `maxBytes` bytes, written `gapMs` apart, with no
 * regard for event boundaries (an event may arrive in several pieces, several
 * events in one piece). Slice sizes come from a seeded PRNG, so a seed gives
 * the same sequence of sizes every time; where the cuts fall is fixed too as
 * long as the stream is generated faster than it is sent (chunk delay 0).
 */
import type { ServerResponse } from 'node:http';
import { writeNow } from './write-now.js';

export interface SliceSettings {
  /** PRNG seed of the slice sizes. */
  readonly seed: number;
  /** Largest slice, bytes (at least 1). */
  readonly maxBytes: number;
  /** Time between two slices, ms. */
  readonly gapMs: number;
}

export const SLICE_DEFAULTS = { maxBytes: 500, gapMs: 1 } as const;

/** mulberry32: a small, fast, seedable PRNG; returns floats in [0, 1). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The slice sizes a seed gives, in order (for tests and documentation). */
export function sliceSizes(settings: SliceSettings, count: number): number[] {
  const rand = seededRandom(settings.seed);
  return Array.from({ length: count }, () => 1 + Math.floor(rand() * settings.maxBytes));
}

/** Queues the stream's bytes and writes them out in slices; ends the response once drained after end(). */
export class SlicedOutput {
  private readonly rand: () => number;
  private readonly queue: Buffer[] = [];
  private queued = 0;
  private scheduled = false;
  private waitingDrain = false;
  private ending = false;
  /** When the next slice is due (performance.now()), or null before the first push. */
  private due: number | null = null;

  constructor(
    private readonly res: ServerResponse,
    private readonly settings: SliceSettings,
    private readonly isClosed: () => boolean,
  ) {
    this.rand = seededRandom(settings.seed);
  }

  /** Bytes waiting to be written. */
  get pending(): number {
    return this.queued;
  }

  push(text: string): void {
    // Nothing was waiting: the provider had nothing to send, so this starts a new run of slices
    // (not a burst of slices that fell due while the stream was being generated).
    if (this.queued === 0 && this.due !== null) this.due = Math.max(this.due, performance.now());
    if (text.length > 0) {
      const b = Buffer.from(text, 'utf8');
      this.queue.push(b);
      this.queued += b.length;
    }
    this.schedule();
  }

  /** Writes what is queued, then ends the response. */
  end(last: string): void {
    this.ending = true;
    this.push(last);
  }

  private schedule(): void {
    if (this.scheduled || this.waitingDrain || this.isClosed()) return;
    if (this.queued === 0) {
      if (this.ending) this.res.end();
      return;
    }
    // Slices are due on a fixed clock (one gap apart from the first push), not a gap after the
    // last write: a provider on its own machine keeps its pace whatever runs beside the gateway,
    // so a late slice (this process kept off a busy core) does not push back every slice after it.
    // The first slice is due a gap after the first push, so a stream generated at once is
    // cut the same way every time.
    this.due ??= performance.now() + this.settings.gapMs;
    const wait = this.due - performance.now();
    this.scheduled = true;
    if (wait > 0) setTimeout(() => this.tick(), wait);
    else setImmediate(() => this.tick());
  }

  private tick(): void {
    this.scheduled = false;
    if (this.isClosed()) return;
    const size = Math.min(this.queued, 1 + Math.floor(this.rand() * this.settings.maxBytes));
    const slice = this.take(size);
    this.due! += this.settings.gapMs; // set by schedule(), which queued this tick
    const ok = writeNow(this.res, slice);
    if (!ok) {
      this.waitingDrain = true;
      this.res.once('drain', () => {
        this.waitingDrain = false;
        // A reader that held the stream back gets the rest at the same pace, not in a burst.
        this.due = Math.max(this.due!, performance.now() + this.settings.gapMs);
        this.schedule();
      });
      return;
    }
    this.schedule();
  }

  private take(size: number): Buffer {
    const parts: Buffer[] = [];
    let need = size;
    while (need > 0) {
      const head = this.queue[0]!;
      if (head.length <= need) {
        parts.push(head);
        this.queue.shift();
        need -= head.length;
      } else {
        parts.push(head.subarray(0, need));
        this.queue[0] = head.subarray(need);
        need = 0;
      }
    }
    this.queued -= size;
    return parts.length === 1 ? parts[0]! : Buffer.concat(parts, size);
  }
}

/** Slicing asked for by the simulator's options (every stream) or by a request's directives. */
export interface SliceRequest {
  readonly sliced?: boolean;
  readonly sliceSeed?: number;
  readonly sliceMaxBytes?: number;
  readonly sliceGapMs?: number;
}

/**
 * The slice settings of one stream, or null for one write per event. The
 * request's directives override the options; without a seed, the next of the
 * simulator's sequence.
 */
export function sliceSettingsFor(d: SliceRequest, options: SliceRequest | null, nextSeed: () => number): SliceSettings | null {
  if (!d.sliced && !options?.sliced) return null;
  return {
    seed: d.sliceSeed ?? options?.sliceSeed ?? nextSeed(),
    maxBytes: d.sliceMaxBytes ?? options?.sliceMaxBytes ?? SLICE_DEFAULTS.maxBytes,
    gapMs: d.sliceGapMs ?? options?.sliceGapMs ?? SLICE_DEFAULTS.gapMs,
  };
}
