/**
 * Load on one test gateway for the CPU tools (ab-cpu.ts, gc-cost.ts,
 * perf-profile.ts): n chats of one kind, JSON or 32-token streams, through
 * `connections` keep-alive connections at once, each sending its next request
 * as soon as the last one ended; each JSON chat after `turns` messages of
 * history (default none); with `stop`, until it is aborted (n: Infinity).
 * Every answer must be a 200. Resolves with the chats answered.
 */
import type { TestGateway } from '../harness/gateway.js';
import { SequentialClient, StreamClient } from './latency.js';
import { chatBody, streamBody, STREAM_TOKENS } from './scenarios.js';

export type LoadKind = 'json' | 'stream';

export async function driveGateway(gw: TestGateway, n: number, kind: LoadKind, connections: number, turns = 0, stop?: AbortSignal): Promise<number> {
  const url = `${gw.base}/chat/completions`;
  const headers = { 'content-type': 'application/json', 'x-api-key': gw.key };
  let left = n;
  let answered = 0;
  await Promise.all(
    Array.from({ length: connections }, async () => {
      const c =
        kind === 'stream'
          ? new StreamClient({ url, method: 'POST', headers, body: streamBody('svc-core', STREAM_TOKENS, 0) }, () => null)
          : new SequentialClient({ url, method: 'POST', headers, body: chatBody('svc-core', turns) });
      try {
        while (left-- > 0 && !stop?.aborted) {
          const r = await c.one();
          if (r.status !== 200) throw new Error(`load: HTTP ${r.status}`);
          answered++;
        }
      } finally {
        c.close();
      }
    }),
  );
  return answered;
}
