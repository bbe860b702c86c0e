import { inject } from 'vitest';

// Runs in each unit test worker before a test file is loaded: os.tmpdir() (and
// any child process a test starts) uses the run's private directory, which the
// global setup checks is empty at the end (private-tmpdir.ts).
process.env.TMPDIR = inject('unitTmpDir');
