import { appendFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { INTENT_EMPTY_BYTES, INTENT_SEGMENT_BYTES, IntentLog } from '../../sidecar/src/domain/billing/intent-log.js';

/** The write-ahead log of settlements on their way to the ledger (real files). */
const root = mkdtempSync(join(tmpdir(), 'intents-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const fresh = () => join(mkdtempSync(join(root, 'l-')), 'journal.jsonl.intents');
const files = (base: string) => readdirSync(join(base, '..')).sort();
const line = (i: number) => JSON.stringify({ op: 'settle', input: { requestId: `req-${String(i).padStart(4, '0')}`, pad: 'x'.repeat(40) } });

describe('IntentLog', () => {
  it('each line is on disk once record returns, and stays until done', () => {
    const base = fresh();
    const log = new IntentLog(base);
    const a = log.record(line(1));
    expect(readFileSync(`${base}.0`, 'utf8')).toBe(`${line(1)}\n`);
    const b = log.record(line(2));
    expect(log.pending).toBe(2);
    log.done(a);
    log.done(b);
    expect(log.pending).toBe(0);
    // Small segments are not emptied on every done (that would be a syscall per request).
    expect(readFileSync(`${base}.0`, 'utf8').split('\n').filter(Boolean)).toHaveLength(2);
  });

  it('a full segment with nothing open is emptied in place; with intents open a new one begins and the old one goes with its last intent', () => {
    const base = fresh();
    const log = new IntentLog(base, 200);
    const marks = [1, 2, 3].map((i) => log.record(line(i))); // > 200 bytes: segment 0 is full
    for (const m of marks) log.done(m);
    expect(statSync(`${base}.0`).size).toBe(0); // emptied: all done
    const held = [4, 5, 6].map((i) => log.record(line(i))); // fills segment 0 again, all open
    const later = log.record(line(7)); // segment 0 full and open: segment 1 begins
    expect(later).toBe(1);
    expect(files(base)).toEqual(['journal.jsonl.intents.0', 'journal.jsonl.intents.1']);
    log.done(held[0]!);
    log.done(held[1]!);
    expect(existsSync(`${base}.0`)).toBe(true); // one still open in it
    log.done(held[2]!);
    expect(existsSync(`${base}.0`)).toBe(false);
    expect(log.pending).toBe(1);
    log.done(later);
    log.close();
    expect(files(base)).toEqual([]); // nothing open: no file left behind
  });

  it('what a previous life left is recovered oldest first, a torn last line left out, and never overwritten by the new life', () => {
    const base = fresh();
    const first = new IntentLog(base, 200);
    for (let i = 1; i <= 4; i++) first.record(line(i)); // two segments, all open: the process dies
    appendFileSync(`${base}.1`, '{"op":"settle","inp'); // died inside a write
    const next = new IntentLog(base, 200);
    const mark = next.record(line(9)); // written before recovery: a new segment, not one of the old
    expect(mark).toBe(2);
    expect(next.recover()).toEqual([1, 2, 3, 4].map(line));
    next.forget();
    expect(files(base)).toEqual(['journal.jsonl.intents.2']);
    expect(next.recover()).toEqual([]); // its own segment is not a previous life's
    next.done(mark);
    next.close();
    expect(files(base)).toEqual([]);
  });

  it('a segment is full at exactly its size: the next line begins a new one while any is open', () => {
    const base = fresh();
    const size = Buffer.byteLength(`${line(1)}\n`);
    const log = new IntentLog(base, 2 * size);
    const a = log.record(line(1));
    log.record(line(2)); // exactly full now
    expect(log.record(line(3))).toBe(1);
    log.done(a);
    expect(log.pending).toBe(2);
    // Emptied at exactly its size too, once nothing in it is open.
    const fresh2 = fresh();
    const small = new IntentLog(fresh2, 2 * size);
    const b = small.record(line(1));
    const c = small.record(line(2));
    small.done(b);
    small.done(c);
    expect(statSync(`${fresh2}.0`).size).toBe(0);
    expect(small.record(line(3))).toBe(0); // the same segment, reused
  });

  it('with the default sizes the open segment is emptied once it holds 4 KiB and nothing in it is open, and not before', () => {
    const base = fresh();
    const log = new IntentLog(base);
    const size = Buffer.byteLength(`${line(1)}\n`);
    const fit = Math.ceil(INTENT_EMPTY_BYTES / size); // lines that reach the threshold
    for (let i = 1; i < fit; i++) log.done(log.record(line(i)));
    expect(statSync(`${base}.0`).size).toBe((fit - 1) * size);
    log.done(log.record(line(fit)));
    expect(statSync(`${base}.0`).size).toBe(0);
  });

  it('a mark done twice, or one never handed out, changes nothing', () => {
    const base = fresh();
    const log = new IntentLog(base);
    const a = log.record(line(1));
    log.done(a);
    log.done(a);
    log.done(42);
    expect(log.pending).toBe(0);
    const b = log.record(line(2));
    expect(log.pending).toBe(1);
    log.done(b);
    expect(log.pending).toBe(0);
  });

  it('recovery reads only its own numbered segments, in numeric order, and skips every segment this life has open or closed', () => {
    const base = fresh();
    writeFileSync(`${base}.10`, `${line(10)}\n`);
    writeFileSync(`${base}.9`, `${line(9)}\n\n`);
    writeFileSync(`${base}.bak`, `${line(99)}\n`); // not a segment
    writeFileSync(`${base}.7x`, `${line(98)}\n`);
    writeFileSync(`${base}.x7`, `${line(96)}\n`);
    writeFileSync(join(base, '..', 'journal.jsonl'), `${line(97)}\n`); // the journal itself
    const size = Buffer.byteLength(`${line(1)}\n`);
    const log = new IntentLog(base, size);
    const first = log.record(line(1)); // segment 11, full at once
    const second = log.record(line(2)); // segment 12: 11 is closed, still open
    expect([first, second]).toEqual([11, 12]);
    expect(log.recover()).toEqual([line(9), line(10)]);
    log.forget();
    expect(files(base)).toEqual(['journal.jsonl', 'journal.jsonl.intents.11', 'journal.jsonl.intents.12', 'journal.jsonl.intents.7x', 'journal.jsonl.intents.bak', 'journal.jsonl.intents.x7']);
    expect(log.pending).toBe(2);
  });

  it('a directory that is not there holds nothing to recover; close before any line is a no-op', () => {
    const log = new IntentLog(join(root, 'missing', 'journal.jsonl.intents'));
    expect(log.recover()).toEqual([]);
    log.forget();
    log.close();
  });

  it('segments are private to the process owner (0600)', () => {
    const base = fresh();
    const log = new IntentLog(base);
    log.record(line(1));
    expect(statSync(`${base}.0`).mode & 0o777).toBe(0o600);
  });

  it.each([
    ['a short write (a full disk)', (fd: number, text: string) => writeSync(fd, text.slice(0, 10))],
    ['a failed write', () => {
      throw new Error('ENOSPC');
    }],
  ])('%s: the line is refused and no later line follows its fragment', (_, failing) => {
    const base = fresh();
    let calls = 0;
    const log = new IntentLog(base, INTENT_SEGMENT_BYTES, (fd, text) => (++calls === 2 ? failing(fd, text) : writeSync(fd, text)));
    const first = log.record(line(1));
    expect(() => log.record(line(2))).toThrow();
    const third = log.record(line(3));
    expect(third).not.toBe(first); // a new segment
    expect(log.pending).toBe(2);
    // Were the process to die now, the next start reads both whole lines and no fragment.
    expect(new IntentLog(base).recover()).toEqual([line(1), line(3)]);
    log.done(first);
    expect(existsSync(`${base}.${first}`)).toBe(false);
    log.done(third);
    log.close();
    expect(files(base)).toEqual([]);
  });

  it('close keeps a segment that still has intents open (the next start recovers them)', () => {
    const base = fresh();
    const log = new IntentLog(base);
    const a = log.record(line(1));
    const b = log.record(line(2));
    log.close();
    log.done(a);
    expect(new IntentLog(base).recover()).toEqual([line(1), line(2)]); // b is still open
    log.done(b); // carried out after all (a stop's late settlement): nothing left to recover
    expect(new IntentLog(base).recover()).toEqual([]);
  });
});
