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

/** A chunk as JSON, compact or spaced with blanks only (a line break or tab sends a chunk to the full parse). */
const show = (v: unknown, spaced: boolean): string => (spaced ? JSON.stringify(v, null, 1).replace(/\n/g, '') : JSON.stringify(v));

describe('scanDeltaChunk', () => {
  it('finds exactly the provider choices and the content size in any plain delta chunk', () => {
    fc.assert(
      fc.property(deltaChunk, fc.boolean(), (chunk, spaced) => {
        const data = show(chunk, spaced);
        const scanned = scanDeltaChunk(data);
        expect(scanned).not.toBeNull();
        expect(JSON.parse(scanned!.choices)).toEqual(chunk.choices);
        expect(scanned!.created).toBe(chunk.created ?? null);
        // Counted where the members are, so the same with or without whitespace between them.
        const chars = chunk.choices.reduce((n, c) => n + (c.delta.content === undefined ? 0 : JSON.stringify(c.delta.content).length - 2), 0);
        expect(scanned!.contentChars).toBe(chars);
        expect(scanned!.finished).toBe(chunk.choices.some((c) => typeof c.finish_reason === 'string'));
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

  it('counts tool-call arguments and a finish_reason only when it is a string', () => {
    const args = '{"city":"Z\\u00fcrich"}';
    const chunk = { choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { name: 'w', arguments: args } }] }, finish_reason: null }] };
    const scanned = scanDeltaChunk(JSON.stringify(chunk));
    expect(scanned).not.toBeNull();
    expect(scanned!.contentChars).toBe(JSON.stringify(args).length - 2);
    expect(scanned!.finished).toBe(false);
    const done = scanDeltaChunk(JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] }));
    expect(done?.finished).toBe(true);
  });

  it('passes literals and numbers only when they are exactly JSON', () => {
    const chunk = (choice: string, top = '') => `{${top}"choices":[{"index":0,"delta":{"content":"x"},${choice}}]}`;
    for (const ok of ['"logprobs":false', '"logprobs":true', '"logprobs":null', '"index":-0', '"index":12e-3', '"logprobs":{"content":[{"token":"a","logprob":-0.5}]}']) {
      expect(scanDeltaChunk(chunk(ok)), ok).not.toBeNull();
    }
    for (const bad of ['"logprobs":falsey', '"logprobs":fals', '"logprobs":truex', '"logprobs":nul', '"index":01', '"index":1.', '"index":-', '"index":+1', '"index":1e', '"logprobs":{"content":[1,,2]}', '"logprobs":[}']) {
      expect(scanDeltaChunk(chunk(bad)), bad).toBeNull();
    }
    const created = (v: string) => scanDeltaChunk(chunk('"finish_reason":null', `"created":${v},`))?.created;
    expect(created('999999999999')).toBe(999999999999);
    for (const bad of ['-1', '1.5', '1e3', '1000000000000']) expect(created(bad), bad).toBeUndefined();
    for (const bad of ['nul', '0', '{}', '"null"', 'true', '1234']) expect(scanDeltaChunk(chunk('"finish_reason":null', `"usage":${bad},`)), bad).toBeNull();
  });

  it('steps aside for malformed or truncated JSON', () => {
    const good = JSON.stringify({ id: 'a', choices: [{ index: 0, delta: { content: 'hi "there"' } }] });
    for (let cut = 0; cut < good.length; cut++) expect(scanDeltaChunk(good.slice(0, cut))).toBeNull();
    expect(scanDeltaChunk(`${good}x`)).toBeNull();
    expect(scanDeltaChunk('[1,2]')).toBeNull();
    expect(scanDeltaChunk('{"choices":[{"a":1}],"created":1e9}')).toBeNull();
    // Trailing commas, at every level.
    expect(scanDeltaChunk('{"choices":[{"index":0,"delta":{}}],}')).toBeNull();
    expect(scanDeltaChunk('{"choices":[{"index":0,"delta":{},}]}')).toBeNull();
    expect(scanDeltaChunk('{"choices":[{"index":0,"delta":{"content":"x",}}]}')).toBeNull();
    expect(scanDeltaChunk('{"choices":[{"index":0,"delta":{}},]}')).toBeNull();
  });
});

/**
 * Soundness over chunks of any shape: whenever the no-parse path answers, a
 * full parse of the same text must agree with it, and the chunk must be one
 * the parsing path would deliver as it is (no reasoning, usage, error, unknown
 * member or odd `created`); otherwise it must step aside. The generator mixes
 * plain chunks with every way a chunk can be unusual.
 */
describe('scanDeltaChunk soundness', () => {
  const scalar = fc.oneof(fc.constant(null), fc.boolean(), fc.integer({ min: -5, max: 5 }), fc.double({ noNaN: true, noDefaultInfinity: true }), text);
  const value = fc.oneof(scalar, fc.array(scalar, { maxLength: 2 }), fc.dictionary(fc.constantFrom('a', 'content', 'reasoning'), scalar, { maxKeys: 2 }));
  const delta = fc.dictionary(fc.constantFrom('role', 'content', 'tool_calls', 'refusal', 'reasoning_content', 'reasoning', 'extra'), value, { maxKeys: 3 });
  const choice = fc.dictionary(fc.constantFrom('index', 'delta', 'finish_reason', 'logprobs', 'message', 'reasoning_content', 'text'), fc.oneof(delta, value), { maxKeys: 4 });
  const chunk = fc.dictionary(
    fc.constantFrom('id', 'object', 'created', 'model', 'system_fingerprint', 'service_tier', 'choices', 'usage', 'error', 'reasoning', 'extra'),
    fc.oneof(fc.array(choice, { minLength: 1, maxLength: 2 }), value, fc.constant({ prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 })),
    { maxKeys: 6 },
  );
  const CHOICE_KEYS = new Set(['index', 'delta', 'finish_reason', 'logprobs']);
  const DELTA_KEYS = new Set(['role', 'content', 'tool_calls', 'function_call', 'refusal']);
  const TOP_KEYS = new Set(['id', 'object', 'model', 'system_fingerprint', 'service_tier', 'created', 'choices', 'usage']);

  it('answers only for chunks the full parse would deliver as they are, and then agrees with it', () => {
    let answered = 0;
    fc.assert(
      fc.property(fc.oneof(chunk, deltaChunk as fc.Arbitrary<Record<string, unknown>>), fc.boolean(), (c, spaced) => {
        const data = spaced ? JSON.stringify(c, null, 1).replace(/\n/g, '') : JSON.stringify(c);
        const spans = scanDeltaChunk(data);
        if (spans === null) return;
        answered++;
        const parsed = JSON.parse(data) as Record<string, unknown>;
        for (const k of Object.keys(parsed)) expect(TOP_KEYS.has(k)).toBe(true);
        expect(parsed.usage ?? null).toBeNull();
        expect(data).not.toContain('reasoning');
        expect(JSON.parse(spans.choices)).toEqual(parsed.choices);
        const choices = parsed.choices as Array<Record<string, unknown>>;
        expect(Array.isArray(choices) && choices.length > 0).toBe(true);
        for (const ch of choices) {
          for (const k of Object.keys(ch)) expect(CHOICE_KEYS.has(k)).toBe(true);
          if ('delta' in ch) {
            expect(typeof ch.delta === 'object' && ch.delta !== null && !Array.isArray(ch.delta)).toBe(true);
            for (const k of Object.keys(ch.delta as object)) expect(DELTA_KEYS.has(k)).toBe(true);
          }
        }
        if ('created' in parsed) {
          expect(Number.isSafeInteger(parsed.created) && (parsed.created as number) >= 0).toBe(true);
          expect(spans.created).toBe(parsed.created);
        } else expect(spans.created).toBeNull();
        expect(spans.finished).toBe(choices.some((ch) => typeof ch.finish_reason === 'string'));
      }),
      { numRuns: 3000 },
    );
    expect(answered).toBeGreaterThan(100); // the generator reaches the fast path often enough to mean something
  });
});

/**
 * Soundness over text that is not quite JSON: a plain chunk with one character
 * inserted, removed or replaced anywhere (structure, escapes, literals, numbers,
 * control characters). Whenever the no-parse path answers, the text must be
 * valid JSON, its choices exactly what the parse finds, and the caller's line
 * unbroken; a corrupted chunk must never pass through as if it were whole.
 */
describe('scanDeltaChunk on corrupted chunks', () => {
  const withTools = fc.record({
    choices: fc.constant([{ index: 0, delta: { tool_calls: [{ index: 0, id: 'c1', type: 'function', function: { name: 'w', arguments: '{"q":"Z\\u00fcrich \\"x\\""}' } }] }, logprobs: { content: [{ token: 'a', logprob: -0.5 }] }, finish_reason: null }]),
    created: fc.nat({ max: 2_000_000_000 }),
  });
  const edit = fc.record({
    at: fc.nat(),
    op: fc.constantFrom('insert', 'delete', 'replace'),
    ch: fc.constantFrom('{', '}', '[', ']', '"', ',', ':', ' ', '\\', '\n', '\t', '\u0001', '0', '-', '.', 'e', 'u', 'x', 't', 'n', 'l'),
  });

  it('answers only for valid JSON, and then agrees with the parse', () => {
    let answered = 0;
    fc.assert(
      fc.property(fc.oneof(deltaChunk as fc.Arbitrary<Record<string, unknown>>, withTools), edit, (chunk, { at, op, ch }) => {
        const good = JSON.stringify(chunk);
        const i = at % (good.length + 1);
        const text = op === 'insert' ? good.slice(0, i) + ch + good.slice(i) : good.slice(0, i) + (op === 'replace' ? ch : '') + good.slice(i + 1);
        const spans = scanDeltaChunk(text);
        if (spans === null) return;
        answered++;
        let parsed: Record<string, unknown>;
        try {
          parsed = JSON.parse(text) as Record<string, unknown>;
        } catch {
          throw new Error(`answered for text that is not JSON: ${text}`);
        }
        expect(JSON.parse(spans.choices)).toEqual(parsed.choices);
        expect(spans.choices).not.toMatch(/[\r\n]/);
      }),
      { numRuns: 20000 },
    );
    expect(answered).toBeGreaterThan(1000);
  });
});

/**
 * A known prefix (the members before `choices` of a chunk scanned whole) only
 * saves work: for any next chunk, scanning with it gives exactly what a whole
 * scan gives, whether the chunk really shares the prefix, shares it and is
 * corrupted after it, or is another kind of chunk altogether.
 */
describe('scanDeltaChunk with a known prefix', () => {
  const edit = fc.record({
    at: fc.nat(),
    /** Half the edits land within two characters of where the prefix ends (the seam a reused scan starts at). */
    nearSeam: fc.boolean(),
    op: fc.constantFrom('insert', 'delete', 'replace', 'none'),
    ch: fc.constantFrom('{', '}', '[', ']', '"', ',', ':', ' ', '\\', '\n', '\u0001', '0', 'e', 'x', 'reasoning', '"error"', '"usage":{}', '"choices":[]'),
  });
  const corrupt = (good: string, seam: number, { at, nearSeam, op, ch }: { at: number; nearSeam: boolean; op: string; ch: string }) => {
    const i = nearSeam ? Math.max(0, Math.min(good.length, seam - 2 + (at % 5))) : at % (good.length + 1);
    if (op === 'none') return good;
    return op === 'insert' ? good.slice(0, i) + ch + good.slice(i) : good.slice(0, i) + (op === 'replace' ? ch : '') + good.slice(i + 1);
  };
  /** The next chunk: the first's members before `choices` (same text, spaced the same), new choices and trailing members, then maybe one edit. */
  const next = fc.record({ choices: deltaChunk.map((c) => c.choices), usage: fc.constantFrom(undefined, null, { prompt_tokens: 1 }), created: fc.option(fc.nat({ max: 99 }), { nil: undefined }) });

  it('gives the same answer as a whole scan', () => {
    let reused = 0;
    fc.assert(
      fc.property(deltaChunk, next, edit, fc.boolean(), (first, second, e, spaced) => {
        const firstText = show(first, spaced);
        const scanned = scanDeltaChunk(firstText);
        expect(scanned).not.toBeNull();
        const known = scanned!.prefix;
        expect(firstText.startsWith(known.text)).toBe(true);
        // The second chunk: the first's own text up to its choices, then the new choices and members.
        const tail = show({ choices: second.choices, ...(second.usage === undefined ? {} : { usage: second.usage }), ...(second.created === undefined ? {} : { created: second.created }) }, spaced);
        const afterChoicesKey = tail.slice(tail.indexOf('[')); // the new choices value and what follows it
        const text = corrupt(known.text + afterChoicesKey, known.text.length, e);
        const whole = scanDeltaChunk(text);
        const withPrefix = scanDeltaChunk(text, known);
        if (text.startsWith(known.text) && whole !== null) reused++;
        if (whole === null) expect(withPrefix).toBeNull();
        else {
          expect(withPrefix).not.toBeNull();
          const { prefix: _a, template: _ta, ...a } = whole;
          const { prefix: _b, template: _tb, ...b } = withPrefix!;
          expect(b).toEqual(a);
        }
      }),
      { numRuns: 10000 },
    );
    expect(reused).toBeGreaterThan(1000);
  });

  it('takes blanks between the prefix and the choices value as a whole scan does (a fast-check counterexample)', () => {
    const first = scanDeltaChunk('{ "id": "a", "choices": [ { "index": 0, "delta": {} } ] }')!;
    expect(first.prefix.text).toBe('{ "id": "a", "choices": ');
    const next = '{ "id": "a", "choices":  [ { "index": 0, "delta": { "content": "x" } } ] }';
    expect(scanDeltaChunk(next, first.prefix)).toMatchObject({ choices: scanDeltaChunk(next)!.choices, contentChars: 1 });
  });

  it('is kept for the stream: the prefix a reused scan returns is the one it was given', () => {
    const a = JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 7, model: 'm', choices: [{ index: 0, delta: { content: 'a' } }] });
    const b = a.replace('"a"', '"bb"');
    const first = scanDeltaChunk(a)!;
    expect(first.prefix.text).toBe(a.slice(0, a.indexOf('[')));
    expect(first.prefix.created).toBe(7);
    const second = scanDeltaChunk(b, first.prefix)!;
    expect(second.prefix).toBe(first.prefix);
    expect(second).toMatchObject({ created: 7, contentChars: 2, choices: '[{"index":0,"delta":{"content":"bb"}}]' });
    // A chunk that does not start with the prefix is scanned whole and gives its own.
    const other = scanDeltaChunk(JSON.stringify({ id: 'c2', choices: [{ index: 0, delta: {} }] }), first.prefix)!;
    expect(other.prefix.text).toBe('{"id":"c2","choices":');
  });
});

/**
 * A template (a chunk scanned whole, cut around its content text) also only
 * saves work: for any next chunk, whatever it answers, a whole scan answers
 * the same; and a next chunk that differs only in plain content text is
 * answered from the template itself.
 */
describe('scanDeltaChunk with a template', () => {
  /** Content text as providers send it: mostly plain words, sometimes what no template may take (quotes, escapes, control characters, the refused word). */
  const words = fc.string({ unit: fc.constantFrom('a', 'é', '漢', '😀', ' ', '{', '}', ',', ':', '[', 'reasoning', '"', '\\', '\n', '\u0001', '\\"', '"}'), maxLength: 12 });
  const edit = fc.record({
    at: fc.nat(),
    op: fc.constantFrom('insert', 'delete', 'replace', 'none'),
    ch: fc.constantFrom('{', '}', '"', ',', ':', ' ', '\\', '\n', 'x', 'reasoning', '"error"'),
  });
  const apply = (good: string, { at, op, ch }: { at: number; op: string; ch: string }) => {
    const i = at % (good.length + 1);
    if (op === 'none') return good;
    return op === 'insert' ? good.slice(0, i) + ch + good.slice(i) : good.slice(0, i) + (op === 'replace' ? ch : '') + good.slice(i + 1);
  };
  const same = (a: ReturnType<typeof scanDeltaChunk>, b: ReturnType<typeof scanDeltaChunk>) => {
    const strip = (s: NonNullable<typeof a>) => ({ choices: s.choices, created: s.created, contentChars: s.contentChars, finished: s.finished });
    expect(a === null).toBe(b === null);
    if (a && b) expect(strip(a)).toEqual(strip(b));
  };

  it('gives the same answer as a whole scan, and is used for chunks that differ only in plain text', () => {
    let fromTemplate = 0;
    fc.assert(
      fc.property(deltaChunk, words, edit, fc.boolean(), (first, next, e, spaced) => {
        const firstText = show(first, spaced);
        const scanned = scanDeltaChunk(firstText)!;
        const t = scanned.template;
        if (t === null) return; // no content string: nothing to cut around
        expect(firstText.startsWith(t.head) && firstText.endsWith(t.tail)).toBe(true);
        // The same chunk with other words in its (last) content string, maybe then edited anywhere.
        const text = apply(t.head + JSON.stringify(next).slice(1, -1) + t.tail, e);
        const withTemplate = scanDeltaChunk(text, scanned.prefix, t);
        same(withTemplate, scanDeltaChunk(text));
        if (withTemplate?.template === t) {
          fromTemplate++;
          expect(withTemplate.prefix).toBe(scanned.prefix);
        }
        // Plain words and no edit: always from the template.
        if (e.op === 'none' && /^[^"\\\u0000-\u001f]*$/.test(next) && !next.includes('reasoning')) expect(withTemplate?.template).toBe(t);
      }),
      { numRuns: 10000 },
    );
    expect(fromTemplate).toBeGreaterThan(300);
  });

  it('counts content beside the cut-out text (other choices) and keeps created and finish_reason from the template', () => {
    const a = JSON.stringify({ id: 'c', created: 5, choices: [{ index: 0, delta: { content: 'xy' } }, { index: 1, delta: { content: 'abc' }, finish_reason: 'stop' }] });
    const first = scanDeltaChunk(a)!;
    expect(first.template!.head.endsWith('"content":"')).toBe(true);
    expect(first.template!.tail.startsWith('"},"finish_reason":"stop"')).toBe(true);
    const b = a.replace('"abc"', '"hello world"');
    const second = scanDeltaChunk(b, first.prefix, first.template)!;
    expect(second.template).toBe(first.template);
    expect(second).toMatchObject({ created: 5, finished: true, contentChars: 2 + 11, choices: JSON.stringify(JSON.parse(b).choices) });
    // A backslash in the text (an escape) is left to the scan, which agrees on its own terms.
    const c = a.replace('"abc"', '"a\\nb"');
    const third = scanDeltaChunk(c, first.prefix, first.template)!;
    expect(third.template).not.toBe(first.template);
    expect(third.contentChars).toBe(2 + 4);
  });
});
