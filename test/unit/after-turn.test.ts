import { describe, expect, it } from 'vitest';
import { AfterTurn } from '../../sidecar/src/domain/billing/after-turn.js';

describe('AfterTurn', () => {
  it('starts nothing in the current turn, then everything asked for in it inside one `together`', async () => {
    const log: string[] = [];
    const after = new AfterTurn((run) => {
      log.push('together:start');
      run();
      log.push('together:end');
    });
    const a = after.run(async () => (log.push('a'), 1));
    const b = after.run(async () => (log.push('b'), 2));
    log.push('turn ends');
    expect(await Promise.all([a, b])).toEqual([1, 2]);
    await new Promise((r) => setImmediate(r)); // one more turn: no second, empty batch follows
    expect(log).toEqual(['turn ends', 'together:start', 'a', 'b', 'together:end']);
  });

  it('starts only after this turn\'s ticks and microtasks, in a later check phase of the event loop', async () => {
    const log: string[] = [];
    const after = new AfterTurn();
    const done = after.run(async () => void log.push('job'));
    queueMicrotask(() => log.push('microtask'));
    process.nextTick(() => log.push('tick'));
    await done;
    expect(log).toHaveLength(3);
    expect(log[2]).toBe('job');
  });

  it('a job asked for while a batch runs goes to the next batch', async () => {
    const batches: number[] = [];
    let size = 0;
    const after = new AfterTurn((run) => {
      size = 0;
      run();
      batches.push(size);
    });
    const count = <T>(v: T) => (size++, v);
    const inner: Promise<string>[] = [];
    const outer = after.run(async () => {
      count(0);
      inner.push(after.run(async () => count('inner')));
      return 'outer';
    });
    expect(await outer).toBe('outer');
    expect(await inner[0]).toBe('inner');
    expect(batches).toEqual([1, 1]);
  });

  it('passes each job\'s failure to its own caller, thrown or rejected, and still starts the others', async () => {
    const after = new AfterTurn();
    const thrown = after.run((() => {
      throw new Error('sync');
    }) as () => Promise<never>);
    const rejected = after.run(async () => {
      throw new Error('async');
    });
    const fine = after.run(async () => 'ok');
    await expect(thrown).rejects.toThrow('sync');
    await expect(rejected).rejects.toThrow('async');
    expect(await fine).toBe('ok');
  });
});
