import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { TestGateway } from './gateway.js';

const run = promisify(execFile);

/** Runs the operator CLI against a test gateway and parses its --json output. */
export function cliJson(gw: TestGateway, ...args: string[]): Promise<any> {
  return run(process.execPath, ['--import', 'tsx', 'sidecar/cli/main.ts', ...args, '--json'], {
    env: { ...process.env, ADMIN_URL: gw.stack.adminUrl, ADMIN_TOKEN: gw.stack.adminToken },
  }).then((r) => JSON.parse(r.stdout));
}
