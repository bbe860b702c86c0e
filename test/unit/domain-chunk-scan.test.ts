import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { scanDeltaChunk } from '../../sidecar/src/domain/sse/chunk-scan.js';

/** The no-parse path for plain delta chunks must agree with a full parse, or step aside. */
const text = fc.string({ unit: fc.constantFrom('a', 'é', '漢', '😀', '"', '\\', '{', '}', '[', ']', ',', ':', ' ', '\n', 'model', 'usage') , maxLength: 30 });

const deltaChunk = fc.record(
  {
    id: fc.string({ maxLength: 10 }),
    object: fc.constant('chat.completion.chunk'),
    created: fc.nat({ max: 2_000_000_000 }),
    model: fc.constantFrom('sim-core-1', 'vendor/model-x'),
    system_fingerprint: fc.string({ maxLength: 8 }),
    usage: fc.constant(null),
    choices: fc.array(
      fc.record(
        {
          index: fc.nat({ max: 3 }),
          delta: fc.record({ role: fc.constant('assistant'), content: text }, { requiredKeys: [] }),
          finish_reason: fc.constantFrom(null, 'stop', 'length'),
        },
        { requiredKeys: ['index', 'delta'] },
      ),
      { minLength: 1, maxLength: 2 },
    ),
  },
  { requiredKeys: ['choices'] },
);

describe('scanDeltaChunk', () => {
  it('finds exactly the provider choices and the content size in any plain delta chunk', () => {
    fc.assert(
      fc.property(deltaChunk, fc.boolean(), (chunk, spaced) => {
        const data = spaced ? JSON.stringify(chunk, null, 1) : JSON.stringify(chunk);
        const scanned = scanDeltaChunk(data);
        expect(scanned).not.toBeNull();
        expect(JSON.parse(scanned!.choices)).toEqual(chunk.choices);
        expect(scanned!.created).toBe(chunk.created ?? null);
        if (!spaced) {
          const chars = chunk.choices.reduce((n, c) => n + (c.delta.content === undefined ? 0 : JSON.stringify(c.delta.content).length - 2), 0);
          expect(scanned!.contentChars).toBe(chars);
        }
      }),
      { numRuns: 500 },
    );
  });

  it.each([
    ['reasoning to strip', { choices: [{ index: 0, delta: { reasoning_content: 'x' } }] }],
    ['a usage object', { choices: [], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }],
    ['usage beside choices', { choices: [{ index: 0, delta: {} }], usage: { prompt_tokens: 1 } }],
    ['an error', { error: { message: 'boom' } }],
    ['an unknown top-level member', { choices: [{ index: 0, delta: { content: 'x' } }], provider: 'vendor-x' }],
    ['an unknown delta member', { choices: [{ index: 0, delta: { content: 'x', thinking: 'secret' } }] }],
    ['an unknown choice member', { choices: [{ index: 0, delta: { content: 'x' }, provider_model: 'sim-core-1' }] }],
    ['a delta that is not an object', { choices: [{ index: 0, delta: 'x' }] }],
    ['a choice that is not an object', { choices: [{ index: 0, delta: { content: 'x' } }, 7] }],
    ['empty choices', { choices: [] }],
    ['no choices', { id: 'x' }],
  ])('steps aside for %s', (_name, chunk) => {
    expect(scanDeltaChunk(JSON.stringify(chunk))).toBeNull();
  });

  it('steps aside for malformed or truncated JSON', () => {
    const good = JSON.stringify({ id: 'a', choices: [{ index: 0, delta: { content: 'hi "there"' } }] });
    for (let cut = 0; cut < good.length; cut++) expect(scanDeltaChunk(good.slice(0, cut))).toBeNull();
    expect(scanDeltaChunk(`${good}x`)).toBeNull();
    expect(scanDeltaChunk('[1,2]')).toBeNull();
    expect(scanDeltaChunk('{"choices":[{"a":1}],"created":1e9}')).toBeNull();
  });
});
