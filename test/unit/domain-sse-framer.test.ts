/** SseFramer: events survive any cut of the byte stream, any line ending, multi-byte text. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SseFramer, type SseEvent } from '../../sidecar/src/domain/sse/framer.js';

interface Block {
  comments: string[];
  event: string | null;
  data: string[]; // each a JSON text (no line breaks)
}

const text = fc.string({ unit: fc.constantFrom('a', 'Z', ' ', '"', ':', 'é', '漢', '😀', '\u00a0', '{'), maxLength: 12 });
const json = fc.jsonValue({ maxDepth: 2 }).chain((v) => text.map((s) => JSON.stringify({ v, s })));
const block: fc.Arbitrary<Block> = fc.record({
  comments: fc.array(text.map((s) => `:${s}`), { maxLength: 2 }),
  event: fc.option(fc.constantFrom('message', 'ping', 'ünïcode'), { nil: null }),
  data: fc.array(json, { maxLength: 3 }),
});
const eol = fc.constantFrom('\n', '\r\n', '\r');

function serialise(blocks: Block[], nl: string): Buffer {
  let out = '';
  for (const b of blocks) {
    const lines = [...b.comments, ...(b.event === null ? [] : [`event: ${b.event}`]), ...b.data.map((d) => `data: ${d}`)];
    if (lines.length === 0) lines.push(':'); // an empty block is no event at all
    out += lines.map((l) => l + nl).join('') + nl;
  }
  return Buffer.from(out, 'utf8');
}

const expected = (blocks: Block[]): SseEvent[] =>
  blocks.map((b) => ({ data: b.data.length ? b.data.join('\n') : null, event: b.event }));

function feed(chunks: Buffer[]): SseEvent[] {
  const f = new SseFramer();
  return [...chunks.flatMap((c) => f.push(c)), ...f.flush()];
}

function cut(buf: Buffer, points: number[]): Buffer[] {
  const at = [...new Set(points.map((p) => p % (buf.length + 1)))].sort((a, b) => a - b);
  const chunks: Buffer[] = [];
  let prev = 0;
  for (const p of [...at, buf.length]) {
    chunks.push(buf.subarray(prev, p));
    prev = p;
  }
  return chunks;
}

describe('SseFramer', () => {
  it('any cut of the stream yields exactly the events of the unsplit stream', () => {
    fc.assert(
      fc.property(fc.array(block, { minLength: 1, maxLength: 6 }), eol, fc.array(fc.nat(), { maxLength: 20 }), (blocks, nl, points) => {
        const bytes = serialise(blocks, nl);
        const whole = feed([bytes]);
        expect(whole).toEqual(expected(blocks));
        expect(feed(cut(bytes, points))).toEqual(whole);
      }),
      { numRuns: 400 },
    );
  });

  it('one byte at a time splits multi-byte characters and CR LF pairs', () => {
    const bytes = Buffer.from('data: {"t":"é漢😀"}\r\n\r\n: c\r\nevent: x\r\ndata: 1\r\ndata: 2\r\n\r\n');
    const chunks = [...bytes].map((b) => Buffer.from([b]));
    expect(feed(chunks)).toEqual([{ data: '{"t":"é漢😀"}', event: null }, { data: '1\n2', event: 'x' }]);
  });

  it('a CR LF split between chunks is one line ending, not two', () => {
    const f = new SseFramer();
    expect(f.push(Buffer.from('data: a\r'))).toEqual([]);
    expect(f.push(Buffer.from('\ndata: b\r\n\r\n'))).toEqual([{ data: 'a\nb', event: null }]);
  });

  it('a chunk holding several events returns them all, in order', () => {
    const f = new SseFramer();
    expect(f.push(Buffer.from('data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4'))).toEqual([1, 2, 3].map((n) => ({ data: String(n), event: null })));
    expect(f.flush()).toEqual([{ data: '4', event: null }]);
    expect(f.flush()).toEqual([]);
  });

  it('flush() returns an unterminated last event, with any line ending', () => {
    for (const tail of ['data: last', 'data: last\n', 'data: last\r\n', 'data: last\r']) {
      const f = new SseFramer();
      expect(f.push(Buffer.from(`data: first\n\n${tail}`))).toEqual([{ data: 'first', event: null }]);
      expect(f.flush()).toEqual([{ data: 'last', event: null }]);
    }
    expect(new SseFramer().flush()).toEqual([]);
  });

  it('only the fields data and event count, not fields that start like them', () => {
    const f = new SseFramer();
    expect(f.push(Buffer.from('datax: 1\nevents: 2\ndat: 3\n: data: 4\n\n'))).toEqual([{ data: null, event: null }]);
  });

  it('a read of 100,000 lines without a colon, then an event: the junk ignored, the event found', () => {
    // (A colon looked for up to the buffer's end on every line makes this quadratic: about 50 GB read here, a third of a second only because memchr is fast over cached bytes.)
    const f = new SseFramer(4 * 1024 * 1024);
    expect(f.push(Buffer.from(`${'xxxxxxxxx\n'.repeat(100_000)}data: 1\n\n`))).toEqual([{ data: '1', event: null }]);
  });

  it('a field without a space after the colon, and a bare data line', () => {
    const f = new SseFramer();
    expect(f.push(Buffer.from('data:x\ndata\n\n'))).toEqual([{ data: 'x\n', event: null }]);
  });

  it('an event larger than the limit throws', () => {
    const f = new SseFramer(16);
    expect(() => f.push(Buffer.from(`data: ${'x'.repeat(32)}`))).toThrow(/too large/);
    expect(new SseFramer(16).push(Buffer.from(`data: ${'x'.repeat(32)}\n\n`))).toHaveLength(1);
  });

  it('an unfinished event of exactly the limit is kept; one byte more throws', () => {
    const at = new SseFramer(16);
    expect(at.push(Buffer.from(`data: ${'x'.repeat(10)}`))).toEqual([]); // 16 bytes pending
    expect(at.flush()).toEqual([{ data: 'x'.repeat(10), event: null }]);
    expect(() => new SseFramer(16).push(Buffer.from(`data: ${'x'.repeat(11)}`))).toThrow(/too large/);
  });

  it('blank lines with no event before them (keep-alives, extra line endings) are not events', () => {
    const f = new SseFramer();
    expect(f.push(Buffer.from('\n\r\n\ndata: 1\n\n\n\n\r\ndata: 2\n\n'))).toEqual([
      { data: '1', event: null },
      { data: '2', event: null },
    ]);
  });

  it('fields other than data and event (id, retry, unknown) change nothing', () => {
    const f = new SseFramer();
    expect(f.push(Buffer.from('event: x\nid: 7\nretry: 100\nfoo: bar\ndata: 1\n\nid: 8\ndata: 2\n\n'))).toEqual([
      { data: '1', event: 'x' },
      { data: '2', event: null },
    ]);
  });
});
