/** fetchJson (the JWKS client): JSON on 200; anything else a FetchError, redirects not followed, bounded in size and time. */
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FetchError, fetchJson } from '../../sidecar/src/adapters/outbound-tls.js';

let server: Server;
let base = '';

beforeAll(async () => {
  server = createServer((req, res) => {
    if (req.url === '/ok') res.end('{"keys":[]}');
    else if (req.url === '/redirect') res.writeHead(302, { location: '/ok' }).end();
    else if (req.url === '/missing') res.writeHead(404).end('{}');
    else if (req.url === '/text') res.end('not json');
    else if (req.url === '/big') res.end(`{"pad":"${'x'.repeat(4096)}"}`);
    // '/slow': never answers
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(() => {
  server.closeAllConnections();
  return new Promise<void>((r) => server.close(() => r()));
});

const get = (path: string, maxBytes?: number) => fetchJson(`${base}${path}`, { tls: null, timeoutMs: 300, maxBytes });

describe('fetchJson', () => {
  it('parses a 200 JSON body', async () => {
    expect(await get('/ok')).toEqual({ keys: [] });
  });

  it.each([
    ['/redirect', 'HTTP 302'],
    ['/missing', 'HTTP 404'],
    ['/text', 'not JSON'],
    ['/slow', 'timed out'],
  ])('%s: FetchError "%s"', async (path, message) => {
    const err = await get(path).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FetchError);
    expect((err as Error).message).toBe(message);
  });

  it('a body larger than maxBytes is refused', async () => {
    await expect(get('/big', 1024)).rejects.toThrow('response too large');
  });
});
