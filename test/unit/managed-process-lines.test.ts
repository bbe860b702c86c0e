import { describe, expect, it } from 'vitest';
import { ManagedProcess } from '../../sidecar/stack/process.js';

/** A child that prints `one` and `two` at once, `three` and `ready` later. */
const SCRIPT = "console.log('one'); console.log('two'); setTimeout(() => console.log('three'), 300); setTimeout(() => console.log('ready'), 600);";

describe('ManagedProcess.watchLines', () => {
  it('hands every later output line to the listener, in order, until it is stopped', async () => {
    const p = new ManagedProcess('lines', process.execPath, ['-e', SCRIPT], { stopGraceMs: 1000 });
    try {
      const seen: string[] = [];
      const stop = p.watchLines((line) => {
        seen.push(line);
        if (line === 'two') stop();
      });
      await p.waitForLine((l) => (l === 'ready' ? true : undefined), 10_000);
      expect(seen).toEqual(['one', 'two']);
      expect(p.lines).toEqual(['one', 'two', 'three', 'ready']);
    } finally {
      await p.stop();
    }
  });

  it('keeps listening while it is not stopped, beside readiness waiters', async () => {
    const p = new ManagedProcess('lines', process.execPath, ['-e', SCRIPT], { stopGraceMs: 1000 });
    try {
      const seen: string[] = [];
      p.watchLines((line) => seen.push(line));
      await p.waitForLine((l) => (l === 'three' ? true : undefined), 10_000);
      await p.waitForLine((l) => (l === 'ready' ? true : undefined), 10_000);
      expect(seen).toEqual(['one', 'two', 'three', 'ready']);
    } finally {
      await p.stop();
    }
  });
});
