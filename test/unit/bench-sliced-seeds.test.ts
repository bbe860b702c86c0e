import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StreamClient } from '../../test/bench/latency.js';
import { SCENARIOS, type Scenario } from '../../test/bench/scenarios.js';
import type { Targets } from '../../test/bench/targets.js';

const targets = {
  upstreamKey: 'up',
  simulatorUrl: 'http://sim',
  bareUrl: 'http://bare',
  floorUrl: 'http://floor',
  gatewayBase: 'http://gw/v1',
  gatewayKey: 'k',
  variant: () => ({ base: 'http://credit/v1', key: 'k2' }),
} as unknown as Targets;

const seedOf = (body: string) => /#sim:slice-seed=(\d+)/.exec(body)?.[1];
const streamRows = (loop: string) => SCENARIOS.filter((s): s is Extract<Scenario, { kind: 'stream' }> => s.kind === 'stream' && s.loop === loop);

describe('bench: sliced rows compare the same slicings', () => {
  it("every target's n-th sliced stream carries slice seed n + 1", () => {
    const rows = streamRows('sliced');
    expect(rows.map((s) => s.target).sort()).toEqual(['bare', 'floor', 'gateway', 'gateway'].sort());
    for (const s of rows) {
      const spec = s.request(targets);
      expect(spec.bodyOf).toBeTypeOf('function');
      for (const n of [0, 1, 41]) {
        const body = spec.bodyOf!(n);
        expect(seedOf(body)).toBe(String(n + 1));
        expect(JSON.parse(body).messages[0].content).toContain('#sim:sliced');
      }
    }
  });

  it('the other stream rows send one fixed body (no seed)', () => {
    for (const loop of ['stream', 'paced']) {
      for (const s of streamRows(loop)) {
        const spec = s.request(targets);
        expect(spec.bodyOf).toBeUndefined();
        expect(seedOf(spec.body ?? '')).toBeUndefined();
      }
    }
  });

  describe('StreamClient', () => {
    let server: Server;
    let url = '';
    const received: Array<{ body: string; length: string | undefined }> = [];
    beforeAll(async () => {
      server = createServer((req, res) => {
        let body = '';
        req.on('data', (c: Buffer) => (body += c.toString()));
        req.on('end', () => {
          received.push({ body, length: req.headers['content-length'] });
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.end('data: {"x":1}\n\ndata: [DONE]\n\n');
        });
      });
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    });
    afterAll(() => new Promise<void>((r) => server.close(() => r())));

    it('sends bodyOf(0), bodyOf(1), ... in order, each with its own content-length', async () => {
      const client = new StreamClient({ url, method: 'POST', headers: {}, body: 'unused', bodyOf: (n) => `body ${'x'.repeat(n)}${n}` }, () => null);
      const sample = await client.run(3);
      client.close();
      expect(sample.doneMs).toHaveLength(3);
      // Each measured stream keeps its request number, which names its body.
      expect(sample.seq).toEqual([0, 1, 2]);
      expect(received).toEqual([
        { body: 'body 0', length: '6' },
        { body: 'body x1', length: '7' },
        { body: 'body xx2', length: '8' },
      ]);
    });
  });
});
