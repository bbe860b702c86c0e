import { describe, expect, it } from 'vitest';
import { readmeBlocks } from '../harness/readme-blocks.js';

const fence = '```';

describe('README block annotations (what readme.test.ts runs)', () => {
  it('reads run, file, output and skip; a block without an annotation or a skip without a reason is a problem', () => {
    const md = [
      '<!-- readme: run -->',
      `${fence}sh`,
      'echo a',
      fence,
      '',
      `${fence}sh`,
      'echo unannotated',
      fence,
      '<!-- readme: skip -->',
      `${fence}sh`,
      'echo no reason',
      fence,
      '<!-- readme: skip needs Docker -->',
      '',
      `${fence}sh`,
      'docker compose up',
      fence,
      '<!-- readme: file client.mjs -->',
      `${fence}js`,
      "import OpenAI from 'openai';",
      fence,
      '<!-- readme: run needs=python-openai -->',
      `${fence}sh`,
      'python3 client.py',
      fence,
      '<!-- readme: output -->',
      `${fence}text`,
      'whatever',
      fence,
      '<!-- readme: launch -->',
      `${fence}sh`,
      'x',
      fence,
    ].join('\n');
    const blocks = readmeBlocks(md);
    expect(blocks.map((b) => [b.line, b.action, b.problem])).toEqual([
      [2, { kind: 'run', needs: null }, null],
      [6, null, 'no <!-- readme: … --> annotation'],
      [10, null, 'skip needs a reason'],
      [15, { kind: 'skip', reason: 'needs Docker' }, null],
      [19, { kind: 'file', name: 'client.mjs' }, null],
      [23, { kind: 'run', needs: 'python-openai' }, null],
      [27, { kind: 'output' }, null],
      [31, null, 'unknown directive "launch"'],
    ]);
    expect(blocks[0]!.text).toBe('echo a');
    expect(blocks[4]!.lang).toBe('js');
  });
});
