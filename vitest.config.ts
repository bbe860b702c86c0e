import { defineConfig } from 'vitest/config';

// Two projects: fast unit tests of the pure domain, and integration tests that
// start the real topology (Envoy, sidecar, simulator, redis-server) as processes.
export default defineConfig({
  test: {
    reporters: ['default'],
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          environment: 'node',
          // A private temporary directory per run; the run fails if a test leaves anything in it.
          globalSetup: ['test/unit/setup/private-tmpdir.ts'],
          setupFiles: ['test/unit/setup/use-private-tmpdir.ts'],
          testTimeout: 20_000,
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
