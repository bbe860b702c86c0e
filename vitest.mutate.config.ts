import { defineConfig } from 'vitest/config';
import { unitTests } from './vitest.config.js';

// The unit tests as mutation testing runs them (stryker.config.mjs, `npm run mutate`;
// Stryker picks the test files that import the mutated code):
// - without the private temporary directory check, which a mutant that breaks a
//   test before its cleanup would trip in every later run of the same worker;
// - modules stay loaded between test files and runs (isolate: false): a mutant is
//   switched on at run time, and static mutants, which would need a reload, are
//   not run (ignoreStatic in stryker.config.mjs).
// - without the tests of deployment files and generated code (Kubernetes, compose, proto
//   drift): they cover no domain code and need the binaries in .tools/, which the
//   mutation sandbox leaves out.
const NOT_DOMAIN = ['test/unit/k8s-manifests.test.ts', 'test/unit/compose-drift.test.ts', 'test/unit/proto-drift.test.ts'];
export default defineConfig({ test: { ...unitTests, exclude: [...NOT_DOMAIN, '**/node_modules/**'], isolate: false } });
