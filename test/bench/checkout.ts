/**
 * Another checkout's gateway, for the side-by-side tools (ab-cpu.ts,
 * ab-latency.ts, refusal-cost.ts): its own test harness, loaded from its path
 * (a worktree with node_modules and .tools linked), so the whole stack it
 * starts is that commit's.
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { GatewayOptions, TestGateway } from '../harness/gateway.js';

export type StartGateway = (opts: GatewayOptions) => Promise<TestGateway>;

/** The startGateway of the checkout at `root`. */
export async function startGatewayIn(root: string): Promise<StartGateway> {
  const mod = (await import(pathToFileURL(resolve(root, 'test/harness/gateway.ts')).href)) as { startGateway: StartGateway };
  return mod.startGateway;
}
