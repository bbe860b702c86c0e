import { request } from 'node:http';
import { expect } from 'vitest';
import { UUID } from './gateway.js';

export interface Reply {
  status: number;
  headers: Headers;
  text: string;
  json: any;
}

export async function call(url: string, init: RequestInit & { key?: string | null } = {}): Promise<Reply> {
  const headers = new Headers(init.headers);
  if (init.key) headers.set('x-api-key', init.key);
  if (init.body !== undefined && !headers.has('content-type')) headers.set('content-type', 'application/json');
  const res = await fetch(url, { ...init, headers });
  return reply(res.status, res.headers, await res.text());
}

function reply(status: number, headers: Headers, text: string): Reply {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status, headers, text, json };
}

/**
 * A GET over a connection whose client end is bound to `localAddress`, e.g.
 * 127.0.0.2 towards a gateway on 127.0.0.1 (all of 127/8 is loopback): the
 * client and the listener then have different addresses.
 */
export function getFrom(localAddress: string, url: string, headers: Record<string, string> = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(url, { localAddress, headers }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => {
        const h = new Headers();
        for (const [k, v] of Object.entries(res.headers)) if (typeof v === 'string') h.set(k, v);
        resolve(reply(res.statusCode ?? 0, h, Buffer.concat(parts).toString()));
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

export const post = (url: string, body: unknown, key?: string | null, headers: Record<string, string> = {}) =>
  call(url, { method: 'POST', body: typeof body === 'string' ? body : JSON.stringify(body), key, headers });

/** Asserts the error envelope: status, code, type, UUID request id equal to the x-request-id header. */
export function expectEnvelope(r: Reply, status: number, code: string | null, type?: string): void {
  expect(r.status, r.text).toBe(status);
  expect(r.headers.get('content-type')).toMatch(/^application\/json/);
  expect(Object.keys(r.json)).toEqual(['error']);
  const e = r.json.error;
  expect(Object.keys(e).sort()).toEqual(['code', 'message', 'param', 'request_id', 'type']);
  expect(e.code).toBe(code);
  if (type) expect(e.type).toBe(type);
  expect(typeof e.message).toBe('string');
  expect(e.message.length).toBeGreaterThan(0);
  expect(e.request_id).toMatch(UUID);
  expect(r.headers.get('x-request-id')).toBe(e.request_id);
}

/** Nothing internal in a response: no internal model name, no provider key. */
export function expectNoLeak(r: Reply, secrets: readonly string[]): void {
  const all = `${r.text}\n${[...r.headers.entries()].map(([k, v]) => `${k}: ${v}`).join('\n')}`;
  for (const s of secrets) expect(all).not.toContain(s);
}
