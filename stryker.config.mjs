// Mutation testing of the pure domain (sidecar/src/domain) against the unit
// tests: `npm run mutate`. Not part of `npm test` or CI (it takes minutes).
// The score and the notable survivors are listed in README.md ("Mutation testing").
/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: 'vitest',
  vitest: { configFile: 'vitest.mutate.config.ts', related: true },
  mutate: ['sidecar/src/domain/**/*.ts'],
  coverageAnalysis: 'perTest',
  // Mutants in module-level code need every test re-run in a fresh environment
  // (an estimated 43% of the time for 9% of the mutants): left out.
  ignoreStatic: true,
  // Two cores shared with other work: at most two test workers.
  concurrency: 2,
  ignorePatterns: ['.tools', '.run', 'reports', 'coverage', 'test/integration', 'test/bench'],
  reporters: ['clear-text', 'progress', 'html', 'json'],
  htmlReporter: { fileName: 'reports/mutation/index.html' },
  jsonReporter: { fileName: 'reports/mutation/mutation.json' },
  clearTextReporter: { allowColor: false, logTests: false, maxTestsToLog: 0 },
  // Stryker rewrites the sandbox's tsconfig.json with the TypeScript compiler API, which
  // TypeScript 7 (native) no longer has; ours has no extends or references to rewrite,
  // so point it at a name that does not exist. (For the same reason no TypeScript checker.)
  tsconfigFile: 'tsconfig.none.json',
  // Reruns test only the mutants whose code or covering tests changed since the last run.
  incremental: true,
  incrementalFile: 'reports/mutation/stryker-incremental.json',
  tempDirName: '.stryker-tmp',
  cleanTempDir: 'always',
};
