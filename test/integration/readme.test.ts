/**
 * The README's examples, run as written against a stack started the way the
 * README starts it (`npm start`, i.e. sidecar/stack/start.ts), so the README
 * cannot drift from what works.
 *
 * Every fenced block carries an annotation (test/harness/readme-blocks.ts);
 * blocks marked `run` are run in order, in one shell state: variables a block
 * assigns are carried to the next. The stack runs on free ports in a
 * temporary run directory, so two rewrites are applied to each block, and
 * only these: the default gateway address http://127.0.0.1:8080 becomes the
 * test gateway's, and `.run/` (the run directory) becomes the temporary one.
 * The operator CLI finds its API and token through ADMIN_URL and
 * ADMIN_TOKEN_FILE, as the README says.
 *
 * The Python example needs the `openai` Python package: it runs when that is
 * importable (from .run/pylib, where .ci/run installs it, or the system), and
 * README_TEST_ALL=1 (set by CI) makes its absence a failure instead of a
 * noted skip.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManagedProcess } from '../../sidecar/stack/process.js';
import { REPO_ROOT } from '../../sidecar/stack/paths.js';
import { requireEnvoy } from '../../sidecar/stack/envoy-bin.js';
import { freePort } from '../harness/ports.js';
import { readmeBlocks, type Block } from '../harness/readme-blocks.js';

const README = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8');
const blocks = readmeBlocks(README);
const PYLIB = join(REPO_ROOT, '.run', 'pylib');
const pythonPath = existsSync(PYLIB) ? PYLIB : '';

function pythonOpenAi(): boolean {
  const r = spawnSync('python3', ['-c', 'import openai'], { env: { ...process.env, PYTHONPATH: pythonPath } });
  return r.status === 0;
}

describe('README.md: every fenced block is annotated (nothing is skipped silently)', () => {
  it('has an annotation on every block, and a reason on every skip', () => {
    const problems = blocks.filter((b) => b.problem).map((b) => `line ${b.line}: ${b.problem}`);
    expect(problems).toEqual([]);
  });
  it('runs a real share of its examples (curl, the CLI, Node, Python)', () => {
    const run = blocks.filter((b) => b.action?.kind === 'run');
    expect(run.length).toBeGreaterThanOrEqual(8);
    const all = run.map((b) => b.text).join('\n');
    for (const needle of ['curl ', 'npm run -s cli --', 'node client.mjs', 'python3 client.py', '/v1/usage', '/v1/whoami']) expect(all).toContain(needle);
  });
  it('is self-contained: no link or path outside the repository, and every linked repository file exists', () => {
    expect(README).not.toMatch(/\]\(\.\.\/|\.\.\/shared|\/work\//);
    for (const [, target] of README.matchAll(/\]\(((?:docs|examples|envoy|sidecar|test)\/[^)#\s]+)/g)) {
      expect(existsSync(join(REPO_ROOT, target!)), target).toBe(true);
    }
  });
});

describe('README.md examples against a started stack', () => {
  let stack: ManagedProcess;
  let runDir: string;
  let gatewayUrl: string;
  let env: NodeJS.ProcessEnv;
  let state: string;
  const written: string[] = [];

  beforeAll(async () => {
    requireEnvoy();
    runDir = mkdtempSync(join(tmpdir(), 'readme-run-'));
    const [gateway, envoyAdmin, admin, upstream, account] = await Promise.all([freePort(), freePort(), freePort(), freePort(), freePort()]);
    gatewayUrl = `http://127.0.0.1:${gateway}`;
    const stackEnv: NodeJS.ProcessEnv = {
      ...process.env,
      RUN_DIR: runDir,
      GATEWAY_PORT: String(gateway),
      ENVOY_ADMIN_PORT: String(envoyAdmin),
      ADMIN_PORT: String(admin),
      UPSTREAM_URL: `http://127.0.0.1:${upstream}/v1`,
      ACCOUNT_SERVICE_URL: `http://127.0.0.1:${account}`,
      START_SIMULATOR: '1',
    };
    delete stackEnv.REDIS_URL;
    delete stackEnv.GATEWAY_CONFIG;
    delete stackEnv.ADMIN_TOKEN;
    stack = new ManagedProcess('npm-start', process.execPath, ['--import', 'tsx', join(REPO_ROOT, 'sidecar/stack/start.ts')], { env: stackEnv, cwd: REPO_ROOT });
    await stack.waitForLine((l) => (l.includes('Ctrl-C stops everything.') ? true : undefined), 90_000);
    env = {
      ...process.env,
      ADMIN_URL: `http://127.0.0.1:${admin}`,
      ADMIN_TOKEN_FILE: join(runDir, 'admin-token'),
      DEV_IDP_DIR: join(runDir, 'dev-idp'),
      PYTHONPATH: pythonPath,
    };
    delete env.ADMIN_TOKEN;
    delete env.SVC_API_KEY;
    state = join(runDir, 'readme-shell-state');
    writeFileSync(state, '');
  });

  afterAll(async () => {
    await stack?.stop(10_000);
    for (const f of written) rmSync(f, { force: true });
    if (runDir) rmSync(runDir, { recursive: true, force: true });
  });

  const rewrite = (text: string) => text.replaceAll('http://127.0.0.1:8080', gatewayUrl).replaceAll('.run/', `${runDir}/`);

  function runShell(b: Block): void {
    const assigned = [...new Set([...b.text.matchAll(/^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=/gm)].map((m) => m[1]!))];
    const script = [
      'set -eo pipefail',
      `source ${JSON.stringify(state)}`,
      rewrite(b.text),
      ...assigned.map((v) => `printf 'export %s=%q\\n' ${v} "\${${v}}" >> ${JSON.stringify(state)}`),
    ].join('\n');
    const r = spawnSync('bash', ['-c', script], { cwd: REPO_ROOT, env, encoding: 'utf8', timeout: 90_000 });
    const shown = `README line ${b.line}:\n${b.text}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}\n--- stack\n${stack.tail(40)}`;
    expect(r.status, shown).toBe(0);
  }

  it('runs every block marked run, in order, and each succeeds', () => {
    let ran = 0;
    const notes: string[] = [];
    for (const b of blocks) {
      if (b.action?.kind === 'file') {
        const path = join(REPO_ROOT, b.action.name);
        writeFileSync(path, rewrite(b.text));
        written.push(path);
      } else if (b.action?.kind === 'run') {
        if (b.action.needs === 'python-openai' && !pythonOpenAi()) {
          if (process.env.README_TEST_ALL === '1') throw new Error(`README line ${b.line} needs the Python openai package (python3 -m pip install --target .run/pylib openai)`);
          notes.push(`README line ${b.line}: not run, the Python openai package is not installed (CI installs it into .run/pylib)`);
          continue;
        }
        runShell(b);
        ran++;
      }
    }
    if (notes.length) process.stderr.write(`${notes.join('\n')}\n`);
    expect(ran).toBeGreaterThanOrEqual(8);
  }, 600_000);
});
