/** The buffered logger: per-request lines are written late but never lost or reordered; other lines at once. */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

// The children's tsx keeps its compile cache in their temporary directory: one of this file's own, removed at the end.
const childTmp = mkdtempSync(join(tmpdir(), 'logger-test-'));
const env = { ...process.env, TMPDIR: childTmp };
afterAll(() => rmSync(childTmp, { recursive: true, force: true }));

const LOGGER = new URL('../../sidecar/src/adapters/logger.ts', import.meta.url).pathname;
const script = (body: string) =>
  `import { createLogger, closeLogger } from ${JSON.stringify(LOGGER)};\nconst log = createLogger('info', 'svc-test');\n${body}`;
const lines = (stdout: string) =>
  stdout
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { msg: string; n?: number });

describe('createLogger', () => {
  it('writes every buffered request line, in order, when the process exits at once', () => {
    const r = spawnSync(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', script(`for (let n = 0; n < 50; n++) log.info({ n }, 'request');\nprocess.exit(0);`)],
      { encoding: 'utf8', env },
    );
    expect(r.status).toBe(0);
    const got = lines(r.stdout);
    expect(got.map((l) => l.n)).toEqual(Array.from({ length: 50 }, (_, n) => n));
  });

  it('a line that is not a request line brings the buffered ones out with it, in order; closeLogger drains', () => {
    const r = spawnSync(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', script(`log.info({ n: 1 }, 'request');\nlog.warn('something to see now');\nlog.info({ n: 2 }, 'request');\ncloseLogger(log);\nprocess.exit(0);`)],
      { encoding: 'utf8', env },
    );
    expect(lines(r.stdout).map((l) => l.msg)).toEqual(['request', 'something to see now', 'request']);
  });

  it('a request line reaches stdout on its own, without another line or an exit, within the flush interval', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script(`log.info({ n: 7 }, 'request');\nsetInterval(() => {}, 1000); // alive until killed: only the periodic flush can bring the line out`)], { env });
    try {
      const line = await new Promise<string>((resolve, reject) => {
        let out = '';
        child.stdout.on('data', (d: Buffer) => {
          out += d.toString();
          if (out.includes('\n')) resolve(out);
        });
        child.on('exit', () => reject(new Error(`exited without the line: ${out}`)));
      });
      expect(lines(line)[0]).toMatchObject({ msg: 'request', n: 7 });
    } finally {
      child.kill();
    }
  });

  it('an idle logger makes no writes: one buffered line is one write, and nothing after it', () => {
    // sonic-boom writes through fs.writeSync: every write, empty ones too, is counted here.
    const body = [
      `import fs from 'node:fs';`,
      `let writes = 0; const real = fs.writeSync; fs.writeSync = (...a) => { writes += 1; return real(...a); };`,
      `log.info({ n: 1 }, 'request');`,
      `setTimeout(() => { process.stderr.write(String(writes)); process.exit(0); }, 550);`,
    ].join('\n');
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script(body)], { encoding: 'utf8', env });
    expect(r.status).toBe(0);
    expect(lines(r.stdout).map((l) => l.n)).toEqual([1]);
    expect(r.stderr.trim()).toBe('1');
  });
});

describe('createLogger: redaction', () => {
  const run = (body: string) => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script(`${body}\ncloseLogger(log);\nprocess.exit(0);`)], { encoding: 'utf8', env });
    expect(r.status).toBe(0);
    return r.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);
  };

  it('censors keys, tokens and prompts on every line that has them, per-request lines too, in order', () => {
    const got = run(
      [
        `log.info({ request_id: 'r1', status: 200, alias: 'svc-core' }, 'request');`,
        `log.info({ request_id: 'r2', authorization: 'Bearer sk-secret', key: 'k-secret' }, 'request');`,
        `log.info({ headers: { authorization: 'Bearer sk-secret', 'x-api-key': 'k-secret', accept: '*/*' } }, 'request refused');`,
        `log.warn({ messages: [{ role: 'user', content: 'my prompt' }], input: 'text', prompt: 'p', token: 't' }, 'odd');`,
        `log.child({ key: 'child-secret' }).info({ n: 1 }, 'request');`,
        `log.info('plain message');`,
      ].join('\n'),
    );
    expect(got.map((l) => l.msg)).toEqual(['request', 'request', 'request refused', 'odd', 'request', 'plain message']);
    expect(got[0]).toMatchObject({ request_id: 'r1', status: 200, alias: 'svc-core', service: 'svc-test' });
    expect(got[1]).toMatchObject({ request_id: 'r2', authorization: '[redacted]', key: '[redacted]' });
    expect(got[2]?.headers).toEqual({ authorization: '[redacted]', 'x-api-key': '[redacted]', accept: '*/*' });
    expect(got[3]).toMatchObject({ messages: '[redacted]', input: '[redacted]', prompt: '[redacted]', token: '[redacted]' });
    expect(got[4]).toMatchObject({ key: '[redacted]', n: 1 });
    const all = got.map((l) => JSON.stringify(l)).join('\n');
    for (const secret of ['sk-secret', 'k-secret', 'my prompt', 'child-secret']) expect(all).not.toContain(secret);
  });

  it('a line redaction cannot change is written the same without it, at the level set now', () => {
    const got = run(`log.debug({ n: 0 }, 'request');\nlog.level = 'debug';\nlog.debug({ n: 1 }, 'request');\nlog.info({ n: 2, ok: true, none: null }, 'request');`);
    expect(got.map((l) => l.n)).toEqual([1, 2]);
    expect(got[1]).toMatchObject({ level: 30, msg: 'request', n: 2, ok: true, none: null, name: 'svc-test', service: 'svc-test' });
    expect(typeof got[1]?.time).toBe('string');
  });
});
