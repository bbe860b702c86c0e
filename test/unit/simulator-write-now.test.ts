import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { writeNow } from '../../sidecar/simulator/write-now.js';

describe('simulator writeNow', () => {
  it('undoes the response cork (Node 24 holds chunks there) and the socket cork, and passes on write()', () => {
    const calls: string[] = [];
    let corked = 1;
    const res = {
      write: (piece: string) => (calls.push(`write ${piece}`), false),
      get writableCorked() {
        return corked;
      },
      uncork: () => (calls.push('res.uncork'), (corked -= 1)),
      socket: { uncork: () => calls.push('socket.uncork') },
    } as unknown as ServerResponse;
    expect(writeNow(res, 'a')).toBe(false);
    expect(writeNow(res, 'b')).toBe(false);
    expect(calls).toEqual(['write a', 'res.uncork', 'socket.uncork', 'write b', 'socket.uncork']);
  });

  it('delivers what was written even when the connection is dropped in the same tick', async () => {
    const server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      writeNow(res, 'data: one\n\n');
      writeNow(res, 'data: two\n\n');
      res.destroy();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const { port } = server.address() as AddressInfo;
      const res = await fetch(`http://127.0.0.1:${port}/`);
      expect(res.status).toBe(200);
      let got = '';
      await expect(
        (async () => {
          for await (const c of res.body!) got += Buffer.from(c).toString();
        })(),
      ).rejects.toThrow();
      expect(got).toBe('data: one\n\ndata: two\n\n');
    } finally {
      server.close();
    }
  });
});
