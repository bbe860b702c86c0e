// The two per-request registries kept in slots instead of a Set or timers
// (so the garbage collector is not made to keep finished requests): the
// exchanges a stop must end, and the Redis commands that must give up at
// their deadline. Each is checked against a plain model over random
// sequences of operations, and on the cases that matter by hand.
import fc from 'fast-check';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LiveExchanges } from '../../sidecar/src/adapters/envoy/ext-proc-service.js';
import { CommandDeadlines } from '../../sidecar/src/store/command-deadlines.js';

describe('LiveExchanges', () => {
  it('counts, removes by slot and ends every exchange still listed', () => {
    const live = new LiveExchanges();
    const ended: string[] = [];
    const a = { endNow: () => ended.push('a') };
    const b = { endNow: () => ended.push('b') };
    const c = { endNow: () => ended.push('c') };
    const sa = live.add(a);
    const sb = live.add(b);
    live.add(c);
    expect(live.size).toBe(3);
    live.delete(sb, b);
    expect(live.size).toBe(2);
    live.delete(sb, b); // twice: nothing more
    expect(live.size).toBe(2);
    // The freed slot is reused; the old token no longer removes its new holder.
    const d = { endNow: () => ended.push('d') };
    expect(live.add(d)).toBe(sb);
    live.delete(sb, b);
    expect(live.size).toBe(3);
    live.delete(sa, a);
    live.endAll();
    expect(ended.sort()).toEqual(['c', 'd']);
  });

  it('endAll copes with exchanges that remove themselves (as the adapter does)', () => {
    const live = new LiveExchanges();
    const calls: number[] = [];
    for (let i = 0; i < 5; i++) {
      const end = {
        endNow: () => {
          calls.push(i);
          live.delete(slot, end);
        },
      };
      const slot = live.add(end);
    }
    live.endAll();
    expect(calls.sort()).toEqual([0, 1, 2, 3, 4]);
    expect(live.size).toBe(0);
  });

  it('behaves as a set of exchanges over any sequence of adds and deletes', () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(fc.constant<'add'>('add'), fc.nat(40)), { maxLength: 200 }), (ops) => {
        const live = new LiveExchanges();
        const model = new Set<number>();
        const called: number[] = [];
        const held: Array<{ id: number; slot: number; end: { endNow(): void } }> = [];
        for (const op of ops) {
          if (op === 'add') {
            const id = held.length;
            const end = { endNow: () => called.push(id) };
            held.push({ id, slot: live.add(end), end });
            model.add(id);
          } else if (held.length > 0) {
            // Deleting any token ever handed out, live or not: only a live one counts.
            const h = held[op % held.length] as (typeof held)[number];
            live.delete(h.slot, h.end);
            model.delete(h.id);
          }
          expect(live.size).toBe(model.size);
        }
        live.endAll();
        expect(called.sort((a, b) => a - b)).toEqual([...model].sort((a, b) => a - b));
      }),
    );
  });
});

describe('CommandDeadlines', () => {
  const clock = () => {
    let t = 1_000;
    return { now: () => t, advance: (ms: number) => (t += ms) };
  };

  it('fails a command only once its deadline has passed, with "Command timed out"', () => {
    const c = clock();
    const d = new CommandDeadlines(1_000, c.now);
    const errors: string[] = [];
    d.watch((e) => errors.push(`${e.name}: ${(e.cause as Error).message}`));
    c.advance(999);
    d.check();
    expect(errors).toEqual([]);
    c.advance(1);
    d.check();
    expect(errors).toEqual(['StoreUnavailableError: Command timed out']);
    expect(d.size).toBe(0);
    d.check();
    expect(errors).toHaveLength(1);
  });

  it('a command answered in time is never failed; done() after a failure changes nothing', () => {
    const c = clock();
    const d = new CommandDeadlines(100, c.now);
    const failed: string[] = [];
    const fa = () => failed.push('a');
    const fb = () => failed.push('b');
    const sa = d.watch(fa);
    const sb = d.watch(fb);
    d.done(sa, fa);
    c.advance(100);
    d.check();
    expect(failed).toEqual(['b']);
    // b's slot is free again; a late answer for b must not free the next command's slot.
    d.done(sb, fb);
    const fc2 = () => failed.push('c');
    const sc = d.watch(fc2);
    d.done(sb, fb);
    expect(d.size).toBe(1);
    d.done(sc, fc2);
    expect(d.size).toBe(0);
  });

  afterEach(() => {
    vi.useRealTimers();
  });

  it('looks every tenth of the timeout, at least every 5 ms', () => {
    expect(new CommandDeadlines(1_000).checkEveryMs).toBe(100);
    expect(new CommandDeadlines(1_005).checkEveryMs).toBe(101);
    expect(new CommandDeadlines(20).checkEveryMs).toBe(5);
  });

  it('runs one interval while commands are under way and none once idle', () => {
    vi.useFakeTimers();
    const d = new CommandDeadlines(1_000, () => Date.now());
    const fails = [() => {}, () => {}, () => {}];
    const slots = fails.map((f) => d.watch(f));
    expect(vi.getTimerCount()).toBe(1);
    fails.forEach((f, i) => d.done(slots[i] as number, f));
    vi.advanceTimersByTime(100); // the next look finds nothing under way
    expect(vi.getTimerCount()).toBe(0);
    const failed: string[] = [];
    d.watch((e) => failed.push((e.cause as Error).message));
    expect(vi.getTimerCount()).toBe(1);
    vi.advanceTimersByTime(999);
    expect(failed).toEqual([]);
    vi.advanceTimersByTime(100); // the first look at or after the deadline
    expect(failed).toEqual(['Command timed out']);
    vi.advanceTimersByTime(100);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('gives up through its own interval within timeout + a tenth, and stops the interval when idle', async () => {
    const d = new CommandDeadlines(50);
    const started = performance.now();
    const err = await new Promise<Error>((resolve) => d.watch(resolve));
    expect((err.cause as Error).message).toBe('Command timed out');
    expect(performance.now() - started).toBeGreaterThanOrEqual(49);
    // The next check finds nothing under way and clears the interval (the process may exit).
    await new Promise((r) => setTimeout(r, 30));
    expect((d as unknown as { timer: unknown }).timer).toBeNull();
  });

  it('over any schedule fails exactly the commands not answered by their deadline', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ at: fc.nat(500), answerAfter: fc.option(fc.nat(300), { nil: null }) }), { maxLength: 60 }),
        fc.integer({ min: 10, max: 200 }),
        (cmds, timeout) => {
          // Events in time order: sends, answers and checks every 7 ms.
          type Ev = { t: number; kind: 'send' | 'answer'; i: number } | { t: number; kind: 'check' };
          const evs: Ev[] = [];
          cmds.forEach((c, i) => {
            evs.push({ t: c.at, kind: 'send', i });
            if (c.answerAfter !== null) evs.push({ t: c.at + c.answerAfter, kind: 'answer', i });
          });
          for (let t = 0; t <= 1_200; t += 7) evs.push({ t, kind: 'check' });
          const order = { send: 0, answer: 1, check: 2 } as const;
          evs.sort((a, b) => a.t - b.t || order[a.kind] - order[b.kind]);
          let now = 0;
          const d = new CommandDeadlines(timeout, () => now);
          const slots = new Map<number, { slot: number; fail: () => void }>();
          const failed = new Set<number>();
          for (const ev of evs) {
            now = ev.t;
            if (ev.kind === 'check') d.check();
            else if (ev.kind === 'send') {
              const fail = () => failed.add(ev.i);
              slots.set(ev.i, { slot: d.watch(fail), fail });
            } else {
              const s = slots.get(ev.i)!;
              d.done(s.slot, s.fail);
            }
          }
          cmds.forEach((c, i) => {
            // Answered before the first check at or after its deadline: never failed.
            const deadline = c.at + timeout;
            const firstCheck = Math.ceil(deadline / 7) * 7;
            const answeredInTime = c.answerAfter !== null && c.at + c.answerAfter <= firstCheck;
            if (firstCheck > 1_200) return; // never checked in this schedule
            expect(failed.has(i)).toBe(!answeredInTime);
          });
          expect(d.size).toBe(cmds.filter((c, i) => !failed.has(i) && c.answerAfter === null).length);
        },
      ),
    );
  });
});
