// CLI: npx tsx sidecar/stack/proto-gen.ts [outDir]
// Regenerates the ts-proto output (default: sidecar/src/generated).
import { resolve } from 'node:path';
import { DEFAULT_OUT_DIR, generateProto } from './proto-gen-lib.js';

const outDir = process.argv[2] ? resolve(process.argv[2]) : DEFAULT_OUT_DIR;
try {
  await generateProto(outDir);
  console.log(`generated TypeScript from proto/ into ${outDir}`);
} catch (err) {
  console.error(err instanceof Error ? err.message : err);
  process.exitCode = 1;
}
