import { defineConfig, type TestProjectInlineConfiguration } from 'vitest/config';

/** The unit tests; mutation testing runs them too (vitest.mutate.config.ts). */
export const unitTests = {
  name: 'unit',
  include: ['test/unit/**/*.test.ts'],
  environment: 'node',
  testTimeout: 20_000,
} satisfies TestProjectInlineConfiguration['test'];

// Two projects: fast unit tests of the pure domain, and integration tests that
// start the real topology (Envoy, sidecar, simulator, redis-server) as processes.
export default defineConfig({
  test: {
    reporters: ['default'],
    projects: [
      {
        test: {
          ...unitTests,
          // A private temporary directory per run; the run fails if a test leaves anything in it.
          globalSetup: ['test/unit/setup/private-tmpdir.ts'],
          setupFiles: ['test/unit/setup/use-private-tmpdir.ts'],
        },
      },
      {
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          environment: 'node',
          testTimeout: 60_000,
          hookTimeout: 120_000,
          fileParallelism: false,
          pool: 'forks',
        },
      },
    ],
  },
});
