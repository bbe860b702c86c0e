// CLI: npx tsx sidecar/stack/proto-gen.ts [outDir]     regenerate the ts-proto output (default: sidecar/src/generated)
//      npx tsx sidecar/stack/proto-gen.ts --check-protoc  only make sure protoc (grpcio-tools) is installed
import { resolve } from 'node:path';
import { DEFAULT_OUT_DIR, ensureProtoc, generateProto } from './proto-gen-lib.js';

try {
  if (process.argv[2] === '--check-protoc') {
    await ensureProtoc();
    console.log('protoc ready');
  } else {
    const outDir = process.argv[2] ? resolve(process.argv[2]) : DEFAULT_OUT_DIR;
    await generateProto(outDir);
    console.log(`generated TypeScript from proto/ into ${outDir}`);
  }
} catch (err) {
  console.error(err instanceof Error ? err.message : err);
  process.exitCode = 1;
}
