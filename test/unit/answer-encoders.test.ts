import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BinaryWriter } from '@bufbuild/protobuf/wire';
import { constantHeader, encodeCheckResponse, encodesLean as checkLean } from '../../sidecar/src/adapters/envoy/check-response-encode.js';
import { varintSize } from '../../sidecar/src/adapters/envoy/wire-write.js';
import { plainHeader, rawHeader } from '../../sidecar/src/adapters/envoy/headers.js';
import { encodeProcessingResponse, encodesLean as processingLean } from '../../sidecar/src/adapters/envoy/processing-response-encode.js';
import { ProcessingResponse, type CommonResponse } from '../../sidecar/src/generated/envoy/service/ext_proc/v3/external_processor.js';
import type { HeaderValueOption } from '../../sidecar/src/generated/envoy/config/core/v3/base.js';
import { CheckResponse } from '../../sidecar/src/generated/envoy/service/auth/v3/external_auth.js';

/** The generated encoder: the bytes the lean one must write. */
const reference = (m: CheckResponse) => Buffer.from(CheckResponse.encode(m).finish());

// Any text (multi-byte included), empty, or long enough for a two- and three-byte length.
const long = fc.tuple(fc.string({ unit: 'grapheme', minLength: 1, maxLength: 3 }), fc.integer({ min: 40, max: 6000 })).map(([s, n]) => s.repeat(n));
const text = fc.oneof({ arbitrary: fc.string({ unit: 'grapheme', maxLength: 12 }), weight: 8 }, { arbitrary: fc.constant(''), weight: 2 }, { arbitrary: long, weight: 1 });
const constants = [constantHeader('content-type', 'application/json'), constantHeader('x-svc-flow', 'stream'), constantHeader('authorization', 'Bearer sk-é'), constantHeader('', '')];
const header: fc.Arbitrary<HeaderValueOption> = fc.oneof(
  fc.record({ key: text, value: text }).map(({ key, value }) => plainHeader(key, value)),
  fc.constantFrom(...constants),
);
const okResponse = fc.record({
  headers: fc.array(header, { maxLength: 8 }),
  headersToRemove: fc.array(text, { maxLength: 6 }),
  responseHeadersToAdd: fc.constant([]),
  queryParametersToSet: fc.constant([]),
  queryParametersToRemove: fc.constant([]),
});
// Not "__proto__": the generated Struct.wrap assigns keys onto a plain object, which drops that one.
const metadataKey = fc.oneof(text, fc.constantFrom('0', '12', 'held')).filter((k) => k !== '__proto__');
const scalar = fc.oneof({ arbitrary: text, weight: 6 }, fc.double(), fc.integer(), fc.boolean(), fc.constant(null), fc.constant(undefined));
const { value } = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: 'small', withCrossShrink: true }, scalar, fc.dictionary(metadataKey, tie('value'), { maxKeys: 4 })),
}));
const metadata = fc.dictionary(metadataKey, value, { maxKeys: 12 });
const lean: fc.Arbitrary<CheckResponse> = fc.record(
  {
    status: fc.option(fc.constant({ code: 0, message: '', details: [] }), { nil: undefined }),
    okResponse: fc.option(okResponse, { nil: undefined }),
    dynamicMetadata: fc.option(metadata, { nil: undefined }),
  },
  { requiredKeys: [] },
) as fc.Arbitrary<CheckResponse>;

describe('the lean CheckResponse encoder', () => {
  it('writes the generated encoder’s bytes for every answer of the lean shape', () => {
    fc.assert(
      fc.property(lean, (m) => {
        expect(encodeCheckResponse(m).equals(reference(m))).toBe(true);
      }),
      { numRuns: 1000 },
    );
  });

  it('writes the same bytes for an admitted chat as the generated encoder (the common answer)', () => {
    const m: CheckResponse = {
      status: { code: 0, message: '', details: [] },
      okResponse: {
        headers: [...constants.slice(0, 3), plainHeader('content-length', '1234')],
        headersToRemove: ['x-api-key', 'cookie'],
        responseHeadersToAdd: [],
        queryParametersToSet: [],
        queryParametersToRemove: [],
      },
      dynamicMetadata: { tenant_id: 't-1', subject_id: 'k-1', auth_method: 'api_key', scopes: 'inference', key_id: 'k-1', role: '', held: '2500', leased: '1' },
    };
    const bytes = encodeCheckResponse(m);
    expect(bytes.equals(reference(m))).toBe(true);
    expect(CheckResponse.decode(bytes).dynamicMetadata).toEqual(m.dynamicMetadata);
    expect(CheckResponse.decode(bytes).okResponse?.headers.map((h) => [h.header?.key, h.header?.value])).toEqual([
      ['content-type', 'application/json'],
      ['x-svc-flow', 'stream'],
      ['authorization', 'Bearer sk-é'],
      ['content-length', '1234'],
    ]);
  });

  it('leaves every other answer to the generated encoder, with the same bytes', () => {
    const ok = { headers: [], headersToRemove: [], responseHeadersToAdd: [], queryParametersToSet: [], queryParametersToRemove: [] };
    const others: CheckResponse[] = [
      { status: { code: 7, message: 'denied', details: [] }, deniedResponse: { status: { code: 401 }, headers: [plainHeader('content-type', 'application/json')], body: '{"error":{}}' } },
      { status: { code: 0, message: 'x', details: [] } },
      { status: { code: 3, message: '', details: [] } },
      { status: { code: 0, message: '', details: [{ typeUrl: 'type.googleapis.com/x.Y', value: Buffer.from([1]) }] } },
      { status: { code: 0, message: '', details: [] }, deniedResponse: { status: { code: 403 }, headers: [], body: '' } },
      { deniedResponse: { status: { code: 403 }, headers: [], body: 'no' } },
      { okResponse: { ...ok, headers: [{ header: { key: 'k', value: 'v', rawValue: Buffer.alloc(0) }, append: true, appendAction: 0, keepEmptyValue: false }] } },
      { okResponse: { ...ok, headers: [{ header: { key: 'k', value: 'v', rawValue: Buffer.alloc(0) }, append: undefined, appendAction: 2, keepEmptyValue: false }] } },
      { okResponse: { ...ok, headers: [{ header: { key: 'k', value: '', rawValue: Buffer.alloc(0) }, append: undefined, appendAction: 0, keepEmptyValue: true }] } },
      { okResponse: { ...ok, headers: [{ header: undefined, append: undefined, appendAction: 0, keepEmptyValue: false }] } },
      { okResponse: { ...ok, dynamicMetadata: { a: 'b' } } },
      { okResponse: { ...ok, responseHeadersToAdd: [plainHeader('x', 'y')] } },
      { okResponse: { ...ok, queryParametersToSet: [{ key: 'a', value: 'b' }] } },
      { okResponse: { ...ok, queryParametersToRemove: ['a'] } },
      { dynamicMetadata: { list: ['a', 1] } },
      { dynamicMetadata: { nested: { list: [] } } },
      { errorResponse: { status: { code: 503 }, headers: [], body: '' } },
    ];
    for (const m of others) {
      expect(checkLean(m)).toBe(false);
      expect(encodeCheckResponse(m).equals(reference(m))).toBe(true);
    }
  });

  it('writes every answer the gateway gives on an admitted request itself (the generated encoder only for the rest)', () => {
    const ok = { headersToRemove: ['x-api-key'], responseHeadersToAdd: [], queryParametersToSet: [], queryParametersToRemove: [] };
    const answers: CheckResponse[] = [
      // an admitted chat: provider headers, the rewritten size, the principal and hold
      { status: { code: 0, message: '', details: [] }, okResponse: { ...ok, headers: [...constants, plainHeader('content-length', '42')] }, dynamicMetadata: { tenant_id: 't', held: '1', leased: '1' } },
      // the key check before a large body
      { status: { code: 0, message: '', details: [] }, okResponse: undefined, dynamicMetadata: undefined },
      // an account route: identity headers, nothing held
      { status: { code: 0, message: '', details: [] }, okResponse: { ...ok, headers: [plainHeader('x-svc-tenant-id', 't')] }, dynamicMetadata: { tenant_id: 't', n: 1, b: false, none: null, nested: { a: 'b' } } },
      // a field left undefined is left out, at any level, as the generated encoder leaves it out
      { status: { code: 0, message: '', details: [] }, okResponse: undefined, dynamicMetadata: { tenant_id: 't', lease: undefined, nested: { a: undefined, b: 'c' } } },
      // a raw value is written as the generated encoder writes it
      { okResponse: { ...ok, headers: [{ header: { key: 'k', value: '', rawValue: Buffer.from('raw') }, append: undefined, appendAction: 0, keepEmptyValue: false }] } },
    ];
    for (const m of answers) {
      expect(checkLean(m)).toBe(true);
      expect(encodeCheckResponse(m).equals(reference(m))).toBe(true);
    }
  });

  it('copies a constant header already encoded: the same header written by hand gives the same bytes', () => {
    const m = (h: HeaderValueOption): CheckResponse => ({ okResponse: { headers: [h], headersToRemove: [], responseHeadersToAdd: [], queryParametersToSet: [], queryParametersToRemove: [] } });
    const constant = m(constantHeader('accept-encoding', 'identity'));
    expect(encodeCheckResponse(constant)).toEqual(encodeCheckResponse(m(plainHeader('accept-encoding', 'identity'))));
    expect(encodeCheckResponse(constant).equals(reference(constant))).toBe(true); // the object says what its bytes say
    expect(Object.isFrozen(constantHeader('a', 'b').header)).toBe(true);
  });

  it('writes metadata whose lengths need two and three bytes at every level, larger than its scratch buffer', () => {
    // A key, a value, an entry and a nested Struct each at 127, 128 and 16,384 bytes or more
    // (where a one-byte length becomes two, and two become three), multi-byte text among them,
    // and 40 KB in all: the writer's buffer starts at 4 KiB and grows.
    // First one value of 1.5 million characters (4.5 MB reserved for it): more than twice any
    // buffer an earlier test can have left, so the growth must go by what is needed, not double.
    const huge: CheckResponse = { dynamicMetadata: { a: 'ü'.repeat(1_500_000), b: 'c' } };
    expect(encodeCheckResponse(huge).equals(reference(huge))).toBe(true);
    const answers: CheckResponse[] = [127, 128, 129, 16_383, 16_384, 20_000].map((n) => ({
      dynamicMetadata: {
        ['k'.repeat(n)]: 'v',
        short: 'é'.repeat(Math.ceil(n / 2)),
        nested: { inner: { deep: 'x'.repeat(n), n: 1.5 }, after: true },
        last: null,
      },
    }));
    for (const m of answers) {
      expect(checkLean(m)).toBe(true);
      expect(encodeCheckResponse(m).equals(reference(m))).toBe(true);
    }
    // Nesting deeper than the writer goes is left to the generated encoder.
    const levels = (n: number) => {
      let o: Record<string, unknown> = { end: 'x' };
      for (let i = 0; i < n; i++) o = { level: o };
      return { dynamicMetadata: o } as CheckResponse;
    };
    expect(checkLean(levels(10))).toBe(true);
    expect(checkLean(levels(40))).toBe(false);
    for (const m of [levels(10), levels(40)]) expect(encodeCheckResponse(m).equals(reference(m))).toBe(true);
    // One answer after another reuses the buffer: each keeps its own bytes.
    const both = answers.map((m) => encodeCheckResponse(m));
    both.forEach((b, i) => expect(b.equals(reference(answers[i]!))).toBe(true));
  });
});

// ext_proc's answers (processing-response-encode.ts).
const processingReference = (m: ProcessingResponse) => Buffer.from(ProcessingResponse.encode(m).finish());
const bytesOf = fc.oneof(fc.uint8Array({ maxLength: 40 }), fc.uint8Array({ minLength: 200, maxLength: 20_000 })).map((b) => Buffer.from(b));
const mutation = fc.record({
  setHeaders: fc.array(fc.oneof(fc.record({ key: text, value: text }).map(({ key, value }) => rawHeader(key, value)), header), { maxLength: 4 }),
  removeHeaders: fc.array(text, { maxLength: 3 }),
});
const common = fc.record(
  {
    status: fc.constantFrom(0, 1, 300),
    headerMutation: mutation,
    bodyMutation: fc.record(
      {
        body: bytesOf,
        clearBody: fc.boolean(),
        streamedResponse: fc.record({ body: bytesOf, endOfStream: fc.boolean(), endOfStreamWithoutMessage: fc.boolean(), grpcMessageCompressed: fc.boolean() }),
      },
      { requiredKeys: [] },
    ),
    clearRouteCache: fc.boolean(),
  },
  { requiredKeys: ['status', 'clearRouteCache'] },
);
const phase = fc.record({ response: common }, { requiredKeys: [] });
const trailers = fc.record({ headerMutation: mutation }, { requiredKeys: [] });
const leanProcessing = fc.record(
  {
    requestHeaders: phase,
    responseHeaders: phase,
    requestBody: phase,
    responseBody: phase,
    requestTrailers: trailers,
    responseTrailers: trailers,
    dynamicMetadata: fc.dictionary(metadataKey, fc.oneof(value, metadata), { maxKeys: 3 }),
    requestDrain: fc.boolean(),
  },
  { requiredKeys: ['requestDrain'] },
) as fc.Arbitrary<ProcessingResponse>;

describe('the lean ProcessingResponse encoder', () => {
  it('writes the generated encoder’s bytes for every answer of the lean shape', () => {
    fc.assert(
      fc.property(leanProcessing, (m) => {
        expect(encodeProcessingResponse(m).equals(processingReference(m))).toBe(true);
      }),
      { numRuns: 1000 },
    );
  });

  it('a streamed piece and the last one with the access log’s fields: the same bytes, and they decode to what was sent', () => {
    const piece = (body: string, endOfStream: boolean): ProcessingResponse => ({
      requestDrain: false,
      responseBody: { response: { status: 0, headerMutation: undefined, bodyMutation: { streamedResponse: { body: Buffer.from(body), endOfStream, endOfStreamWithoutMessage: false, grpcMessageCompressed: false } }, clearRouteCache: false } },
    });
    const last = { ...piece('data: [DONE]\n\n', true), dynamicMetadata: { gateway: { outcome: 'ok', alias: 'svc-core', prompt_tokens: 12, completion_tokens: 30, usage_estimated: 'false' } } };
    for (const m of [piece('data: {"choices":[]}\n\n', false), piece('', false), last]) {
      const bytes = encodeProcessingResponse(m);
      expect(bytes.equals(processingReference(m))).toBe(true);
      expect(ProcessingResponse.decode(bytes)).toEqual(ProcessingResponse.decode(processingReference(m)));
    }
    expect(ProcessingResponse.decode(encodeProcessingResponse(last)).dynamicMetadata).toEqual(last.dynamicMetadata);
  });

  it('leaves every other answer to the generated encoder, with the same bytes', () => {
    const base: ProcessingResponse = { requestDrain: false };
    const others: ProcessingResponse[] = [
      { ...base, immediateResponse: { status: { code: 404 }, headers: { setHeaders: [rawHeader('content-type', 'application/json')], removeHeaders: [] }, body: Buffer.from('{}'), details: 'gateway_reply' } },
      { ...base, streamedImmediateResponse: { headersResponse: undefined } as never },
      { ...base, modeOverride: { requestHeaderMode: 1, responseHeaderMode: 0, requestBodyMode: 0, responseBodyMode: 0, requestTrailerMode: 0, responseTrailerMode: 0 } },
      { ...base, overrideMessageTimeout: { seconds: 1, nanos: 0 } },
      { ...base, dynamicMetadata: { gateway: { list: [1] } } },
      { ...base, responseBody: { response: { status: -1, clearRouteCache: false } } },
      { ...base, responseHeaders: { response: { status: 0, clearRouteCache: false, trailers: { headers: [] } } } },
      { ...base, responseHeaders: { response: { status: 0, clearRouteCache: false, headerMutation: { setHeaders: [{ header: { key: 'k', value: 'v', rawValue: Buffer.alloc(0) }, append: true, appendAction: 0, keepEmptyValue: false }], removeHeaders: [] } } } },
      { ...base, responseTrailers: { headerMutation: { setHeaders: [{ header: undefined, append: undefined, appendAction: 0, keepEmptyValue: false }], removeHeaders: [] } } },
      // one header of the lean kind beside one that is not
      { ...base, requestHeaders: { response: { status: 0, clearRouteCache: false, headerMutation: { setHeaders: [rawHeader('a', 'b'), { header: { key: 'k', value: 'v', rawValue: Buffer.alloc(0) }, append: false, appendAction: 0, keepEmptyValue: false }], removeHeaders: [] } } } },
    ];
    for (const m of others) {
      expect(processingLean(m)).toBe(false);
      expect(encodeProcessingResponse(m).equals(processingReference(m))).toBe(true);
    }
  });

  it('writes every answer of an exchange itself', () => {
    const common = (c: Omit<CommonResponse, 'status' | 'clearRouteCache'>) => ({ response: { status: 0, clearRouteCache: false, ...c } });
    const answers: ProcessingResponse[] = [
      { requestDrain: false, requestBody: common({ headerMutation: { setHeaders: [rawHeader('content-length', '99')], removeHeaders: [] }, bodyMutation: { body: Buffer.from('{}') } }) },
      { requestDrain: false, responseHeaders: common({ headerMutation: { setHeaders: [rawHeader('x-svc-model', 'svc-core')], removeHeaders: ['server'] } }) },
      { requestDrain: false, responseBody: common({ bodyMutation: { streamedResponse: { body: Buffer.from('data: x'), endOfStream: true, endOfStreamWithoutMessage: false, grpcMessageCompressed: false } } }), dynamicMetadata: { gateway: { outcome: 'ok', prompt_tokens: 3 } } },
      { requestDrain: false, responseTrailers: {} },
      { requestDrain: true, requestTrailers: { headerMutation: { setHeaders: [plainHeader('k', 'v')], removeHeaders: [] } } },
    ];
    for (const m of answers) {
      expect(processingLean(m)).toBe(true);
      expect(encodeProcessingResponse(m).equals(processingReference(m))).toBe(true);
    }
  });
});

describe('varint sizes', () => {
  it('match the protobuf writer’s at every boundary', () => {
    for (const n of [0, 1, 0x7f, 0x80, 0x3fff, 0x4000, 0x1fffff, 0x200000, 0xfffffff, 0x10000000, 0xffffffff]) {
      expect(varintSize(n)).toBe(new BinaryWriter().uint32(n).finish().length);
    }
  });
});
