// Drift check: the committed ts-proto output in sidecar/src/generated must be
// exactly what `npm run proto:gen` produces from proto/. Never skips: if protoc
// is unavailable (and cannot be installed) this test fails.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  DEFAULT_OUT_DIR,
  generateProto,
  isDir,
  listGeneratedFiles,
} from '../../sidecar/stack/proto-gen-lib.js';

const REGEN_HINT = 'run `npm run proto:gen` and commit sidecar/src/generated';

describe('generated protobuf code', () => {
  let tmp: string | undefined;

  afterAll(async () => {
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  it('is byte-identical to a fresh regeneration from proto/', async () => {
    tmp = await mkdtemp(join(tmpdir(), 'proto-drift-'));
    try {
      await generateProto(tmp);
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      throw new Error(`proto drift check could not regenerate code (protoc/ts-proto unavailable?):\n${msg}`);
    }

    expect(await isDir(DEFAULT_OUT_DIR), `${DEFAULT_OUT_DIR} is missing; ${REGEN_HINT}`).toBe(true);
    const fresh = await listGeneratedFiles(tmp);
    const committed = await listGeneratedFiles(DEFAULT_OUT_DIR);
    expect(fresh.length).toBeGreaterThan(0);
    expect(committed, `generated file set differs; ${REGEN_HINT}`).toEqual(fresh);

    const drifted: string[] = [];
    for (const rel of fresh) {
      const [a, b] = await Promise.all([readFile(join(tmp, rel)), readFile(join(DEFAULT_OUT_DIR, rel))]);
      if (!a.equals(b)) drifted.push(rel);
    }
    expect(drifted, `generated files out of date; ${REGEN_HINT}`).toEqual([]);
  });
});
