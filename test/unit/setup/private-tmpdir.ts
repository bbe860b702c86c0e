import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The temporary directory of this unit run: every unit test file's os.tmpdir(). */
    unitTmpDir: string;
  }
}

/**
 * Global setup of the unit project: the run gets a temporary directory of its
 * own (each test worker points os.tmpdir() at it, see use-private-tmpdir.ts),
 * and the run fails if a test left anything in it. Tests clean up what they
 * create; a private directory keeps the check exact while other runs share
 * the system temp directory.
 */
export default function setup(project: TestProject): () => void {
  const dir = mkdtempSync(join(tmpdir(), 'unit-run-'));
  project.provide('unitTmpDir', dir);
  return () => {
    const left = readdirSync(dir);
    rmSync(dir, { recursive: true, force: true });
    if (left.length === 0) return;
    // vitest only logs an error thrown here; the exit code is what fails the run.
    process.exitCode = 1;
    throw new Error(`unit tests left temporary files behind (removed now): ${left.sort().join(', ')}`);
  };
}
