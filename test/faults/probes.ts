/**
 * What the fault suite measures after each scenario: memory of Envoy and the
 * sidecar, whether the stack serves again, and the tenant's books.
 */
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import type { TestGateway } from '../harness/gateway.js';
import { readSse } from '../harness/sse.js';

/** Bytes Envoy's allocator holds for the process (admin /memory `allocated`). */
export async function envoyAllocated(adminUrl: string): Promise<number> {
  const j = (await (await fetch(`${adminUrl}/memory`)).json()) as { allocated: string };
  return Number(j.allocated);
}

/** Resident set of a process (bytes), from /proc. */
export function rss(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

export interface Memory {
  readonly envoy: number;
  readonly sidecar: number;
}

export async function memory(gw: TestGateway): Promise<Memory> {
  return { envoy: await envoyAllocated(gw.stack.envoyAdminUrl), sidecar: rss(gw.stack.process('sidecar').pid) };
}

export const MiB = 1024 * 1024;
export const mb = (n: number): string => `${(n / MiB).toFixed(1)} MiB`;

/** Samples Envoy's and the sidecar's memory every 100 ms until stopped; the peaks. */
export function sampleMemory(gw: TestGateway): { stop(): Promise<Memory> } {
  let envoy = 0;
  let sidecar = 0;
  let on = true;
  const loop = (async () => {
    while (on) {
      try {
        const m = await memory(gw);
        envoy = Math.max(envoy, m.envoy);
        sidecar = Math.max(sidecar, m.sidecar);
      } catch {
        // a process is restarting
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  return {
    async stop() {
      on = false;
      await loop;
      return { envoy, sidecar };
    },
  };
}

/** A chat answer and a whole stream through the gateway. */
export async function servesAgain(gw: TestGateway, key: string): Promise<string | null> {
  const res = await fetch(`${gw.base}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key },
    body: JSON.stringify({ model: 'svc-quick', max_tokens: 20, messages: [{ role: 'user', content: 'still there?' }] }),
  }).catch(() => null);
  if (res?.status !== 200) return `chat answered ${res?.status ?? 'nothing'}`;
  await res.arrayBuffer();
  const s = await readSse(`${gw.base}/chat/completions`, { model: 'svc-quick', max_tokens: 20, stream: true, messages: [{ role: 'user', content: 'and streaming?' }] }, key);
  if (s.status !== 200 || s.events.at(-1) !== '[DONE]') return `stream answered ${s.status} ${s.error ?? ''}`.trim();
  return null;
}

/**
 * A caller that reads nothing: a long stream requested, its response left
 * unread (TCP back-pressure) until release(), then the connection is dropped.
 */
export function slowReader(gw: TestGateway, key: string, tokens: number): { release(): void; started: Promise<void> } {
  const url = new URL(`${gw.base}/chat/completions`);
  const payload = JSON.stringify({ model: 'svc-quick', stream: true, max_tokens: tokens, messages: [{ role: 'user', content: `slow reader #sim:tokens=${tokens}` }] });
  let resolveStarted!: () => void;
  const started = new Promise<void>((r) => (resolveStarted = r));
  const req = request(
    { host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key, 'content-length': Buffer.byteLength(payload) } },
    (res) => {
      res.pause();
      resolveStarted();
    },
  );
  req.on('error', () => resolveStarted());
  req.end(payload);
  return { release: () => req.destroy(), started };
}

/** One unauthenticated upload of `bytes` (no key); resolves with the status (0: the connection was dropped). */
export function unauthenticatedUpload(gw: TestGateway, bytes: number): Promise<number> {
  const url = new URL(`${gw.base}/chat/completions`);
  return new Promise((resolve) => {
    const req = request(
      { host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { 'content-type': 'application/json', 'content-length': bytes } },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
        res.on('error', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', () => resolve(0));
    const chunk = Buffer.alloc(1024 * 1024, 0x20);
    let left = bytes;
    const write = () => {
      while (left > 0) {
        const n = Math.min(left, chunk.length);
        left -= n;
        if (!req.write(n === chunk.length ? chunk : chunk.subarray(0, n))) {
          req.once('drain', write);
          return;
        }
      }
      req.end();
    };
    write();
  });
}
