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
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
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
