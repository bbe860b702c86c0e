import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import { BinaryReader, BinaryWriter } from '@bufbuild/protobuf/wire';
import { decodeProcessingRequest as decodeLean, forwardedMetadata } from '../../sidecar/src/adapters/envoy/processing-request-decode.js';

/** The decoded message as the sidecar reads it: the metadata through forwardedMetadata (kept as bytes until asked for). */
function decodeProcessingRequest(bytes: Uint8Array): ProcessingRequest {
  const m = decodeLean(bytes);
  // Its fields only (the kept bytes sit under a symbol, not a field).
  return { ...(Object.fromEntries(Object.entries(m)) as unknown as ProcessingRequest), metadataContext: forwardedMetadata(m) };
}
import { ProcessingRequest } from '../../sidecar/src/generated/envoy/service/ext_proc/v3/external_processor.js';
import { Metadata } from '../../sidecar/src/generated/envoy/config/core/v3/base.js';

const PHASES = ['requestHeaders', 'responseHeaders', 'requestBody', 'responseBody', 'requestTrailers', 'responseTrailers'] as const;
type Phase = (typeof PHASES)[number];
const isResponse = (p: Phase) => p.startsWith('response');

const metadata = { filterMetadata: { 'envoy.filters.http.ext_authz': { tenant_id: 'ten_1', held: '1200', nested: { a: [1, 'x', true, null] } } }, typedFilterMetadata: {} };
const attributes = { 'envoy.filters.http.ext_proc': { 'request.id': 'req-1', 'request.path': '/v1/chat/completions' } };

function message(phase: Phase, body: Uint8Array, endOfStream: boolean, extras: { metadata: boolean; attributes: boolean }): ProcessingRequest {
  const headers = { headers: { headers: [{ key: ':status', value: '', rawValue: Buffer.from('200') }] }, attributes: {}, endOfStream };
  const part =
    phase.endsWith('Headers')
      ? headers
      : phase.endsWith('Body')
        ? { body: Buffer.from(body), endOfStream, endOfStreamWithoutMessage: false, grpcMessageCompressed: false }
        : { trailers: { headers: [] } };
  return {
    [phase]: part,
    metadataContext: extras.metadata ? (metadata as never) : undefined,
    attributes: extras.attributes ? (attributes as never) : {},
    observabilityMode: false,
  } as ProcessingRequest;
}

/** What the sidecar must see: everything, except start-only fields on response-phase messages. */
function expected(phase: Phase, full: ProcessingRequest): ProcessingRequest {
  return isResponse(phase) ? { ...full, metadataContext: undefined, attributes: {} } : full;
}

describe('decodeProcessingRequest', () => {
  it('decodes like ProcessingRequest.decode, without the start-only fields on response phases', () => {
    fc.assert(
      fc.property(fc.constantFrom(...PHASES), fc.uint8Array({ maxLength: 300 }), fc.boolean(), fc.boolean(), fc.boolean(), (phase, body, eos, md, attrs) => {
        const bytes = ProcessingRequest.encode(message(phase, body, eos, { metadata: md, attributes: attrs })).finish();
        const full = ProcessingRequest.decode(bytes);
        expect(decodeProcessingRequest(bytes)).toEqual(expected(phase, full));
      }),
      { numRuns: 300 },
    );
  });

  it('decodes any metadata and attributes of a request-phase message as the generated decoder does', () => {
    const structOf = fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 6 });
    fc.assert(
      fc.property(
        fc.constantFrom('requestHeaders', 'requestBody', 'requestTrailers'),
        fc.dictionary(fc.string({ maxLength: 12 }), structOf, { maxKeys: 3 }),
        fc.dictionary(fc.string({ maxLength: 12 }), structOf, { maxKeys: 2 }),
        fc.boolean(),
        (phase: Phase, filterMetadata, attrs, typed) => {
          const msg = {
            ...message(phase, Buffer.from('{}'), true, { metadata: false, attributes: false }),
            metadataContext: { filterMetadata, typedFilterMetadata: typed ? { t: { typeUrl: 'type.googleapis.com/x.Y', value: Buffer.from([1, 2]) } } : {} },
            attributes: attrs,
          } as ProcessingRequest;
          const bytes = ProcessingRequest.encode(msg).finish();
          expect(decodeProcessingRequest(bytes)).toEqual(ProcessingRequest.decode(bytes));
        },
      ),
      { numRuns: 300 },
    );
  });

  it("Envoy's attributes (Structs of strings) are read by the lean decoder, as the generated one reads them; any other value goes to the generated one", () => {
    const decode = vi.spyOn(ProcessingRequest, 'decode');
    try {
      const strings = fc.dictionary(fc.string({ maxLength: 10 }), fc.string({ maxLength: 40 }), { maxKeys: 5 });
      fc.assert(
        fc.property(fc.dictionary(fc.string({ maxLength: 12 }), strings, { maxKeys: 3 }), fc.boolean(), (attrs, other) => {
          const all: Record<string, Record<string, unknown>> = other ? { ...attrs, z: { n: 1, s: 'x' } } : attrs;
          const bytes = ProcessingRequest.encode({ ...message('requestBody', Buffer.from('{}'), true, { metadata: true, attributes: false }), attributes: all } as ProcessingRequest).finish();
          decode.mockClear();
          expect(decodeProcessingRequest(bytes)).toEqual(ProcessingRequest.decode(bytes));
          // The generated decoder ran once above, for the comparison; once more only for a value that is not a string.
          expect(decode).toHaveBeenCalledTimes(other ? 2 : 1);
        }),
        { numRuns: 300 },
      );
    } finally {
      decode.mockRestore();
    }
  });

  it('keeps the request-phase metadata the exchange starts from', () => {
    const bytes = ProcessingRequest.encode(message('requestBody', Buffer.from('{}'), true, { metadata: true, attributes: true })).finish();
    const got = decodeProcessingRequest(bytes);
    expect(got.metadataContext?.filterMetadata['envoy.filters.http.ext_authz']).toMatchObject({ tenant_id: 'ten_1', held: '1200' });
    expect(got.attributes['envoy.filters.http.ext_proc']).toMatchObject({ 'request.id': 'req-1' });
  });

  it('handles fields in any order (metadata before the phase, so the kept bytes are not one run)', () => {
    const body = Buffer.from('data: {"choices":[]}\n\n');
    const w = new BinaryWriter();
    Metadata.encode(metadata as never, w.uint32(66).fork()).join(); // field 8, length-delimited
    const inner = ProcessingRequest.encode({
      responseBody: { body, endOfStream: false, endOfStreamWithoutMessage: false, grpcMessageCompressed: false },
      attributes: {},
      observabilityMode: false,
    } as ProcessingRequest).finish();
    const bytes = Buffer.concat([w.finish(), inner, Buffer.from([0x50, 0x01])]); // + observability_mode = true (field 10)
    const got = decodeProcessingRequest(bytes);
    expect(Buffer.from(got.responseBody!.body)).toEqual(body);
    expect(got.observabilityMode).toBe(true);
    expect(got.metadataContext).toBeUndefined();
  });

  it('fields in any order, repeated, or written twice decode as the generated decoder does (response phases without the start-only fields)', () => {
    /** Each top-level field of a request-phase message on its own (tag and value). */
    const fieldsOf = (m: ProcessingRequest) => {
      const parts: Buffer[] = [];
      const bytes = Buffer.from(ProcessingRequest.encode(m).finish());
      const r = new BinaryReader(bytes);
      while (r.pos < r.len) {
        const start = r.pos;
        const [no, wt] = r.tag();
        r.skip(wt, no);
        parts.push(bytes.subarray(start, r.pos));
      }
      return parts;
    };
    const extra = { md2: Metadata.encode({ filterMetadata: { 'envoy.filters.http.ext_authz': { held: '99', more: 'x' } }, typedFilterMetadata: {} }).finish() };
    fc.assert(
      fc.property(
        fc.constantFrom(...PHASES),
        fc.boolean(),
        fc.boolean(),
        fc.constantFrom('none', 'metadata', 'observability', 'phase'),
        fc.infiniteStream(fc.nat()),
        (phase: Phase, attrs, observe, twice, order) => {
          const m = { ...message(phase, Buffer.from('{"a":1}'), true, { metadata: true, attributes: attrs }), observabilityMode: observe } as ProcessingRequest;
          const parts = fieldsOf(m);
          if (twice === 'metadata') parts.push(Buffer.concat([Buffer.from([0x42, extra.md2.length]), Buffer.from(extra.md2)]));
          if (twice === 'observability') parts.push(Buffer.from([0x50, 0x00]));
          if (twice === 'phase') parts.push(parts[0]!);
          const it = order[Symbol.iterator]();
          for (let i = parts.length - 1; i > 0; i--) {
            const j = it.next().value! % (i + 1);
            [parts[i], parts[j]] = [parts[j]!, parts[i]!];
          }
          const bytes = Buffer.concat(parts);
          expect(decodeProcessingRequest(bytes)).toEqual(expected(phase, ProcessingRequest.decode(bytes)));
        },
      ),
      { numRuns: 1000 },
    );
  });

  it('request phase: the metadata is decoded when first asked for, once (never, when the exchange starts from the cache)', () => {
    const m = message('requestBody', Buffer.from('{}'), true, { metadata: true, attributes: true });
    const bytes = Buffer.from(ProcessingRequest.encode(m).finish());
    // Spoil the metadata's first inner byte: only a read of it can fail.
    const at = bytes.indexOf(Buffer.from('envoy.filters.http.ext_authz')) - 2;
    const spoiled = Buffer.from(bytes);
    spoiled[at] = 0xff;
    const got = decodeLean(spoiled);
    expect(got.requestBody?.body.toString()).toBe('{}');
    expect(got.attributes['envoy.filters.http.ext_proc']).toMatchObject({ 'request.id': 'req-1' });
    expect(got.metadataContext).toBeUndefined();
    expect(() => forwardedMetadata(got)).toThrow();
    const good = decodeLean(bytes);
    expect(forwardedMetadata(good)).toBe(forwardedMetadata(good)); // decoded once, then kept
    expect(forwardedMetadata(good)?.filterMetadata['envoy.filters.http.ext_authz']).toMatchObject({ held: '1200' });
    // A message built whole (the generated decoder's, a test's) answers with its own.
    const whole = ProcessingRequest.decode(bytes);
    expect(forwardedMetadata(whole)).toBe(whole.metadataContext);
    expect(forwardedMetadata(decodeLean(ProcessingRequest.encode(message('requestBody', Buffer.from('{}'), true, { metadata: false, attributes: true })).finish()))).toBeUndefined();
  });

  it('request phase: a phase written before and after the metadata: the later one, as the generated decoder reads it', () => {
    const part = (m: Partial<ProcessingRequest>) => Buffer.from(ProcessingRequest.encode({ attributes: {}, observabilityMode: false, ...m } as ProcessingRequest).finish());
    const bytes = Buffer.concat([
      part({ requestBody: { body: Buffer.from('first'), endOfStream: true, endOfStreamWithoutMessage: false, grpcMessageCompressed: false } }),
      part({ metadataContext: metadata as never }),
      part({ requestBody: { body: Buffer.from('second'), endOfStream: false, endOfStreamWithoutMessage: false, grpcMessageCompressed: false } }),
    ]);
    const got = decodeProcessingRequest(bytes);
    expect(got).toEqual(ProcessingRequest.decode(bytes));
    expect(got.requestBody?.body.toString()).toBe('second');
    expect(got.requestBody?.endOfStream).toBe(false); // the whole later message, not a merge
  });

  it('a tag it does not expect (an unknown field, a known one of another wire type): the generated decoder, response phases still without metadata and attributes', () => {
    const unknown = Buffer.from([0xa0, 0x01, 0x07]); // field 20, varint 7
    const wrongType = Buffer.from([0x20, 0x01]); // request_body (4) as a varint
    for (const phase of PHASES) {
      for (const odd of [unknown, wrongType]) {
        const bytes = Buffer.concat([Buffer.from(ProcessingRequest.encode(message(phase, Buffer.from('{"a":1}'), true, { metadata: true, attributes: true })).finish()), odd]);
        const got = decodeProcessingRequest(bytes);
        expect(got).toEqual(expected(phase, ProcessingRequest.decode(bytes)));
        if (!isResponse(phase)) expect(got.metadataContext?.filterMetadata['envoy.filters.http.ext_authz']).toMatchObject({ held: '1200' });
      }
    }
  });

  it('an attribute entry without a value is left out, as the generated decoder leaves it out', () => {
    const bytes = Buffer.concat([
      Buffer.from(ProcessingRequest.encode(message('requestBody', Buffer.from('{}'), true, { metadata: false, attributes: true })).finish()),
      Buffer.from([0x4a, 0x03, 0x0a, 0x01, 0x6b]), // attributes = 9: { key: "k" }, no value
    ]);
    expect(Object.keys(decodeLean(bytes).attributes)).toEqual(Object.keys(ProcessingRequest.decode(bytes).attributes));
    expect(Object.keys(decodeLean(bytes).attributes)).toEqual(['envoy.filters.http.ext_proc']);
  });

  it('a metadata field longer than the message: premature EOF, as the generated decoder says', () => {
    const bytes = Buffer.from([0x42, 0x05, 0x0a, 0x00]); // metadata_context = 8 of 5 bytes, 2 there
    expect(() => decodeLean(bytes)).toThrow(/premature EOF/);
    expect(() => ProcessingRequest.decode(bytes)).toThrow(/premature EOF/);
  });

  /** Whether `part` is a view of `whole`'s own bytes (not a copy elsewhere, not even in the same pooled ArrayBuffer). */
  const isViewOf = (part: Uint8Array, whole: Uint8Array) =>
    part.buffer === whole.buffer && part.byteOffset >= whole.byteOffset && part.byteOffset + part.length <= whole.byteOffset + whole.length;

  it('reads any headers, body or trailers of any phase as the generated decoder does, values and bodies as views of the message', () => {
    const header = fc.record({ key: fc.string({ maxLength: 20 }), value: fc.string({ maxLength: 20 }), rawValue: fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)) });
    const map = fc.record({ headers: fc.array(header, { maxLength: 12 }) });
    const part = (phase: Phase) =>
      phase.endsWith('Headers')
        ? fc.record({ headers: fc.option(map, { nil: undefined }), attributes: fc.constant({}), endOfStream: fc.boolean() })
        : phase.endsWith('Body')
          ? fc.record({ body: fc.uint8Array({ maxLength: 600 }).map((b) => Buffer.from(b)), endOfStream: fc.boolean(), endOfStreamWithoutMessage: fc.boolean(), grpcMessageCompressed: fc.boolean() })
          : fc.record({ trailers: fc.option(map, { nil: undefined }) });
    const messages = fc.constantFrom(...PHASES).chain((phase) =>
      fc.tuple(fc.constant(phase), part(phase), fc.boolean()).map(([p, value, md]) => {
        const m = { [p]: value, metadataContext: md ? (metadata as never) : undefined, attributes: {}, observabilityMode: false } as ProcessingRequest;
        return [p, Buffer.from(ProcessingRequest.encode(m).finish())] as const;
      }),
    );
    fc.assert(
      fc.property(messages, ([phase, bytes]) => {
        const got = decodeProcessingRequest(bytes);
        expect(got).toEqual(expected(phase, ProcessingRequest.decode(bytes)));
        // Read by the lean decoder, not handed to the generated one: views into the message, not copies
        // (a small copy may come from the same pooled ArrayBuffer, so the bytes' place is checked too).
        const body = got.requestBody?.body ?? got.responseBody?.body;
        if (body?.length) expect(isViewOf(body, bytes)).toBe(true);
        const map = (got.requestHeaders ?? got.responseHeaders)?.headers ?? (got.requestTrailers ?? got.responseTrailers)?.trailers;
        for (const h of map?.headers ?? []) if (h.rawValue.length) expect(isViewOf(h.rawValue, bytes)).toBe(true);
      }),
      { numRuns: 1000 },
    );
  });

  it('a field it does not expect inside a phase (a header value, a body, the headers): the generated decoder', () => {
    const headers = (extra: Buffer) => {
      // response_headers = 3 { headers = 1 { headers = 1 { key = 1 "k", raw_value = 3 "v", extra } } }
      const value = Buffer.concat([Buffer.from([0x0a, 0x01, 0x6b, 0x1a, 0x01, 0x76]), extra]);
      const mapBytes = Buffer.concat([Buffer.from([0x0a, value.length]), value]);
      const hh = Buffer.concat([Buffer.from([0x0a, mapBytes.length]), mapBytes]);
      return Buffer.concat([Buffer.from([0x1a, hh.length]), hh]);
    };
    const cases = [
      headers(Buffer.from([0x20, 0x01])), // header value: field 4 as a varint
      headers(Buffer.from([0x12, 0x00])), // header value: value = 2, empty: lean, still equal
      Buffer.from([0x2a, 0x04, 0x0a, 0x00, 0x28, 0x01]), // response_body { body = 1 "", field 5 varint }
      Buffer.from([0x1a, 0x02, 0x10, 0x01]), // response_headers { attributes = 2 as a varint }
      Buffer.from([0x3a, 0x02, 0x10, 0x01]), // response_trailers { field 2 varint }
      // response_headers { headers = 1 (2 bytes) { a header value of 6 bytes, running past the map's end } }: read whole, as the generated decoder reads it
      Buffer.from([0x1a, 0x0a, 0x0a, 0x02, 0x0a, 0x06, 0x0a, 0x01, 0x6b, 0x1a, 0x01, 0x76]),
    ];
    for (const bytes of cases) expect(decodeProcessingRequest(bytes)).toEqual(expected('responseHeaders', ProcessingRequest.decode(bytes)));
  });

  it('rejects a truncated message like the generated decoder', () => {
    const bytes = ProcessingRequest.encode(message('responseBody', Buffer.from('abcdef'), false, { metadata: true, attributes: false })).finish();
    expect(() => decodeProcessingRequest(bytes.subarray(0, bytes.length - 3))).toThrow();
  });
});
