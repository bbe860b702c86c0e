import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { warmUnderLoad } from '../bench/warm-up.js';

/** A provider stand-in: JSON for a plain request, three SSE events and [DONE] for one asking to stream. */
let server: Server;
let url = '';
const bodies: string[] = [];
beforeAll(async () => {
  server = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      bodies.push(body);
      if (body.includes('"fail"')) {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end('{"error":"no"}');
      } else if (body.includes('"stream":true')) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end('data: {"n":1}\n\ndata: {"n":2}\n\ndata: {"n":3}\n\ndata: [DONE]\n\n');
      } else {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"ok":true}');
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/chat/completions`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

const headers = { 'content-type': 'application/json' };

describe('bench warm-up under load', () => {
  it('sends nothing for zero seconds', async () => {
    const before = bodies.length;
    expect(await warmUnderLoad({ url, method: 'POST', headers, body: '{}' }, 4, 0)).toBe(0);
    expect(bodies.length).toBe(before);
  });

  it('keeps several connections busy for the time given and counts what was answered', async () => {
    const before = bodies.length;
    const t0 = performance.now();
    const answered = await warmUnderLoad({ url, method: 'POST', headers, body: '{"plain":1}' }, 4, 0.3);
    const took = performance.now() - t0;
    expect(took).toBeGreaterThanOrEqual(250);
    expect(answered).toBeGreaterThan(4);
    // autocannon may have some requests in flight when it stops: the server saw at least what was counted.
    expect(bodies.length - before).toBeGreaterThanOrEqual(answered);
    expect(bodies.slice(before).every((b) => b === '{"plain":1}')).toBe(true);
  });

  it('reads streams to their end with the check given, each client sending its own sequence of bodies', async () => {
    const before = bodies.length;
    const seen: number[] = [];
    const answered = await warmUnderLoad(
      { url, method: 'POST', headers, bodyOf: (n) => `{"stream":true,"seed":${n + 1}}` },
      2,
      0.3,
      (status, _body, events) => {
        seen.push(events);
        return status === 200 ? null : `status ${status}`;
      },
    );
    expect(answered).toBeGreaterThan(2);
    expect(seen.length).toBeGreaterThanOrEqual(answered);
    expect(seen.every((e) => e === 4)).toBe(true);
    // (The run before may still have had a request in flight: only this run's bodies count.)
    const seeds = bodies.slice(before).filter((b) => b.includes('"stream"')).map((b) => (JSON.parse(b) as { seed: number }).seed);
    // Two clients, each counting from 1.
    expect(seeds.filter((s) => s === 1)).toHaveLength(2);
    expect(Math.max(...seeds)).toBeGreaterThan(1);
  });

  it('fails when answers are errors or streams fail their check: the measured path would stay cold', async () => {
    await expect(warmUnderLoad({ url, method: 'POST', headers, body: '{"fail":1}' }, 2, 0.2)).rejects.toThrow(/0 answered, \d+ failed/);
    await expect(warmUnderLoad({ url, method: 'POST', headers, body: '{"stream":true}' }, 2, 0.2, (_s, _b, events) => (events === 5 ? null : `${events} events`))).rejects.toThrow(
      /0 answered, \d+ failed \(4 events\)/,
    );
    await expect(warmUnderLoad({ url: url.replace(/:\d+\//, ':1/'), method: 'POST', headers, body: '{}' }, 1, 0.2)).rejects.toThrow(/0 answered, 0 failed/);
  });

  it('refuses a unary request whose body changes per request (autocannon sends one body)', async () => {
    await expect(warmUnderLoad({ url, method: 'POST', headers, bodyOf: () => '{}' }, 1, 0.1)).rejects.toThrow(/bodyOf/);
  });
});
