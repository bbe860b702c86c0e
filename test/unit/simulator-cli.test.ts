import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, describe, expect, it } from 'vitest';
import { createSimulator } from '../../sidecar/simulator/server.js';

// The children's own temporary directory (tsx keeps its cache there), removed after them.
const childTmp = mkdtempSync(join(tmpdir(), 'sim-cli-'));
const childEnv = { ...process.env, TMPDIR: childTmp };
afterAll(() => rmSync(childTmp, { recursive: true, force: true }));

describe('simulator CLI', () => {
  it('prints the listening line, serves, and exits cleanly on SIGTERM', async () => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', 'sidecar/simulator/main.ts', '--port', '0', '--host', '127.0.0.1', '--dims', '8', '--reasoning-models', 'r1,r2', '--api-key', 'k'],
      { stdio: ['ignore', 'pipe', 'inherit'], env: childEnv },
    );
    try {
      const lines = createInterface({ input: child.stdout });
      const [line] = (await once(lines, 'line')) as [string];
      const ready = JSON.parse(line) as { event: string; port: number };
      expect(ready.event).toBe('listening');
      expect(ready.port).toBeGreaterThan(0);

      const res = await fetch(`http://127.0.0.1:${ready.port}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer k' },
        body: JSON.stringify({ model: 'r2', messages: [{ role: 'user', content: 'hi' }] }),
      });
      const body = (await res.json()) as { choices: Array<{ message: { reasoning_content?: string } }> };
      expect(body.choices[0]?.message.reasoning_content).toBeTruthy();
      const emb = await fetch(`http://127.0.0.1:${ready.port}/v1/embeddings`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer k' },
        body: JSON.stringify({ model: 'e', input: 'x' }),
      });
      expect(((await emb.json()) as { data: Array<{ embedding: number[] }> }).data[0]?.embedding).toHaveLength(8);

      child.kill('SIGTERM');
      const [code] = (await once(child, 'exit')) as [number | null];
      expect(code).toBe(0);
    } finally {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL');
        await once(child, 'exit');
      }
    }
  });

  it('close() does not wait for hanging streams', async () => {
    const sim = createSimulator();
    const { port } = await sim.listen(0, '127.0.0.1');
    const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: '#sim:hang' }] }),
    });
    expect(res.status).toBe(200);
    // The stream never ends on its own and the client keeps reading: a close() that waited for it
    // would never resolve (the test's timeout fails it). No bound on how long it took.
    await sim.close();
    await expect(res.text()).rejects.toThrow();
  });

  it.each([
    [['--tls-cert', '/nonexistent.pem'], '--tls-cert and --tls-key go together'],
    [['--tls-client-ca', '/ca.pem'], '--tls-client-ca needs --tls-cert and --tls-key'],
    [['--tls-cert', '/nonexistent.pem', '--tls-key', '/nonexistent.key'], '--tls-cert: cannot read /nonexistent.pem (ENOENT)'],
    [['--sliced', '--slice-max', '0'], 'sliceMaxBytes must be an integer >= 1'],
    [['--sliced', '--slice-gap-ms', 'x'], '--slice-gap-ms must be a non-negative integer'],
  ])('bad options %j: exit 2 with "%s"', async (args, message) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'sidecar/simulator/main.ts', '--port', '0', ...args], { stdio: ['ignore', 'ignore', 'pipe'], env: childEnv });
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const [code] = (await once(child, 'exit')) as [number | null];
    expect(code).toBe(2);
    expect(stderr).toContain(message);
  });
});
