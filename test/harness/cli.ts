import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { TestGateway } from './gateway.js';

const run = promisify(execFile);

const cliEnv = (gw: TestGateway, env: NodeJS.ProcessEnv = {}) => ({ ...process.env, ADMIN_URL: gw.stack.adminUrl, ADMIN_TOKEN: gw.stack.adminToken, ...env });

/** Runs the operator CLI against a test gateway and parses its --json output. */
export function cliJson(gw: TestGateway, ...args: string[]): Promise<any> {
  return run(process.execPath, ['--import', 'tsx', 'sidecar/cli/main.ts', ...args, '--json'], { env: cliEnv(gw) }).then((r) => JSON.parse(r.stdout));
}

/** Runs the operator CLI as a person would (human output); never throws on a non-zero exit. */
export async function cliText(gw: TestGateway, args: readonly string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await run(process.execPath, ['--import', 'tsx', 'sidecar/cli/main.ts', ...args], { env: cliEnv(gw, env) });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : 1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}
