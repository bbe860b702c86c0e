import fc from 'fast-check';
import { BinaryWriter } from '@bufbuild/protobuf/wire';
import { describe, expect, it } from 'vitest';
import { decodeCheckRequest } from '../../sidecar/src/adapters/envoy/check-request-decode.js';
import { CheckRequest } from '../../sidecar/src/generated/envoy/service/auth/v3/external_auth.js';

/** What the authz adapter read from the generated decoder before the lean one: the reference. */
function reference(bytes: Uint8Array) {
  const attrs = CheckRequest.decode(bytes).attributes;
  const http = attrs?.request?.http;
  let names: string[];
  let get: (n: string) => string | undefined;
  if (http?.headerMap?.headers.length) {
    const joined = new Map<string, string>();
    for (const h of http.headerMap.headers) {
      const v = h.rawValue && h.rawValue.length ? h.rawValue.toString('utf8') : h.value;
      const prev = joined.get(h.key);
      joined.set(h.key, prev === undefined ? v : `${prev},${v}`);
    }
    names = http.headerMap.headers.map((h) => h.key);
    get = (n) => joined.get(n);
  } else {
    const map = http?.headers ?? {};
    names = Object.keys(map);
    get = (n) => map[n];
  }
  return {
    method: http?.method ?? '',
    path: http?.path ?? '',
    names,
    values: names.map(get),
    body: http?.rawBody && http.rawBody.length ? Buffer.from(http.rawBody) : http?.body ? Buffer.from(http.body) : null,
    peer: attrs?.source?.address?.socketAddress?.address || null,
  };
}

function lean(bytes: Uint8Array) {
  const got = decodeCheckRequest(Buffer.from(bytes));
  return { method: got.method, path: got.path, names: [...got.headers.names], values: got.headers.names.map((n) => got.headers.get(n)), body: got.body, peer: got.peer };
}

// Header names as Envoy sends them (lower case, some repeated); values any text.
const name = fc.constantFrom(':method', ':path', 'x-request-id', 'authorization', 'x-api-key', 'content-type', 'cookie', 'x-a', 'x-b');
const header = fc.record({ key: name, value: fc.string(), raw: fc.option(fc.string({ unit: 'grapheme' }), { nil: undefined }) });
const checkRequest = fc.record({
  method: fc.constantFrom('', 'GET', 'POST'),
  path: fc.string(),
  headerMap: fc.option(fc.array(header, { maxLength: 12 }), { nil: undefined }),
  headers: fc.dictionary(name, fc.string(), { maxKeys: 6 }),
  body: fc.string(),
  rawBody: fc.uint8Array({ maxLength: 200 }),
  source: fc.option(fc.ipV4(), { nil: undefined }),
  destination: fc.option(fc.ipV4(), { nil: undefined }),
  extensions: fc.dictionary(fc.string({ maxLength: 5 }), fc.string({ maxLength: 5 }), { maxKeys: 3 }),
  withTime: fc.boolean(),
});

type Shape = typeof checkRequest extends fc.Arbitrary<infer T> ? T : never;

function encode(c: Shape): Uint8Array {
  return CheckRequest.encode(
    CheckRequest.fromPartial({
      attributes: {
        source: c.source === undefined ? undefined : { address: { socketAddress: { address: c.source, portValue: 40_000 } }, service: 'svc', labels: { a: 'b' } },
        destination: c.destination === undefined ? undefined : { address: { socketAddress: { address: c.destination, portValue: 8080 } } },
        request: {
          time: c.withTime ? { seconds: 1_764_300_000, nanos: 5 } : undefined,
          http: {
            id: '123',
            method: c.method,
            path: c.path,
            host: 'gw',
            headers: c.headers,
            headerMap: c.headerMap && { headers: c.headerMap.map((h) => ({ key: h.key, value: h.value, rawValue: h.raw === undefined ? Buffer.alloc(0) : Buffer.from(h.raw) })) },
            body: c.body,
            rawBody: Buffer.from(c.rawBody),
            size: 7,
          },
        },
        contextExtensions: c.extensions,
        metadataContext: { filterMetadata: { ns: { k: 'v' } }, typedFilterMetadata: {} },
      },
    }),
  ).finish();
}

describe('decodeCheckRequest', () => {
  it('reads what the generated decoder reads: method, path, headers (raw_value, repeats joined), body, peer', () => {
    fc.assert(
      fc.property(checkRequest, (c) => {
        const bytes = encode(c);
        expect(lean(bytes)).toEqual(reference(bytes));
      }),
      { numRuns: 500 },
    );
  });

  it('takes the header map over the headers map, and the headers map when the header map is empty', () => {
    const both = lean(encode({ method: 'POST', path: '/p', headerMap: [{ key: 'x-a', value: '', raw: '1' }, { key: 'x-a', value: 'v', raw: undefined }], headers: { 'x-b': '2' }, body: '', rawBody: new Uint8Array(), source: undefined, destination: undefined, extensions: {}, withTime: false }));
    expect(both).toMatchObject({ names: ['x-a', 'x-a'], values: ['1,v', '1,v'], peer: null, body: null });
    const mapOnly = lean(encode({ method: 'GET', path: '/p', headerMap: [], headers: { 'x-b': '2', 'x-a': '3' }, body: 'hi', rawBody: new Uint8Array(), source: '10.0.0.1', destination: undefined, extensions: {}, withTime: true }));
    expect(mapOnly).toMatchObject({ names: ['x-b', 'x-a'], values: ['2', '3'], peer: '10.0.0.1', body: Buffer.from('hi') });
  });

  it('keeps the last of a repeated field, as the generated decoder does', () => {
    const a = CheckRequest.encode(CheckRequest.fromPartial({ attributes: { source: { address: { socketAddress: { address: '192.0.2.1' } } }, request: { http: { path: '/first' } } } })).finish();
    const b = CheckRequest.encode(CheckRequest.fromPartial({ attributes: { request: { http: { path: '/second', method: 'GET' } } } })).finish();
    const bytes = Buffer.concat([a, b]);
    expect(lean(bytes)).toEqual(reference(bytes));
    expect(lean(bytes)).toMatchObject({ path: '/second', peer: null });
  });

  it('copies the body out of the message buffer', () => {
    const bytes = Buffer.from(encode({ method: 'POST', path: '/p', headerMap: undefined, headers: {}, body: '', rawBody: new Uint8Array([1, 2, 3]), source: undefined, destination: undefined, extensions: {}, withTime: false }));
    const body = decodeCheckRequest(bytes).body!;
    bytes.fill(0);
    expect([...body]).toEqual([1, 2, 3]);
  });

  it('throws on a truncated message, at any cut', () => {
    const bytes = encode({ method: 'POST', path: '/v1/chat/completions', headerMap: [{ key: 'x-a', value: '', raw: 'abc' }], headers: {}, body: '', rawBody: new Uint8Array([7, 7]), source: '192.0.2.9', destination: undefined, extensions: {}, withTime: false });
    for (let cut = 1; cut < bytes.length; cut++) expect(() => decodeCheckRequest(Buffer.from(bytes.subarray(0, cut)))).toThrow();
  });

  it('throws when a nested message runs past its length, even where the buffer goes on', () => {
    // attributes (field 1, length 2) holding source (field 1, length 3): the source's bytes run past
    // the attributes' end into bytes that parse (the generated decoder would not notice).
    expect(() => decodeCheckRequest(Buffer.from([0x0a, 0x02, 0x0a, 0x03, 0x12, 0x01, 0x41]))).toThrow(RangeError);
  });

  it('an empty message has nothing: no method, path, headers, body or peer', () => {
    expect(decodeCheckRequest(Buffer.alloc(0))).toMatchObject({ method: '', path: '', body: null, peer: null });
    expect(decodeCheckRequest(Buffer.alloc(0)).headers.names).toEqual([]);
    // attributes without a request or a source
    const bytes = CheckRequest.encode(CheckRequest.fromPartial({ attributes: { contextExtensions: { a: 'b' } } })).finish();
    expect(lean(bytes)).toEqual(reference(bytes));
    expect(lean(bytes)).toMatchObject({ method: '', path: '', names: [], body: null, peer: null });
    // A source, address or socket address without the field inside it; a map entry without its key.
    for (const partial of [
      { attributes: { source: { service: 'svc' } } },
      { attributes: { source: { address: {} } } },
      { attributes: { source: { address: { socketAddress: { portValue: 1 } } } } },
      { attributes: { request: { http: { headers: { '': 'no name', 'x-b': '' } } } } },
    ]) {
      const b = CheckRequest.encode(CheckRequest.fromPartial(partial)).finish();
      expect(lean(b), JSON.stringify(partial)).toEqual(reference(b));
    }
  });

  it('skips fields it does not know at every level, as the generated decoder does', () => {
    // Unknown fields appended to a message, numbers no message here uses: a varint (99), a 64-bit (98),
    // a 32-bit (96) and a length-delimited one (97).
    const unknown = Buffer.from(new BinaryWriter().uint32(99 << 3).uint32(5).uint32((98 << 3) | 1).fixed64(7).uint32((96 << 3) | 5).fixed32(9).uint32((97 << 3) | 2).bytes(Buffer.from('hi')).finish());
    const withUnknown = (fields: Uint8Array) => Buffer.concat([fields, unknown]);
    const ld = (field: number, body: Uint8Array) => Buffer.from(new BinaryWriter().uint32((field << 3) | 2).bytes(body).finish());
    const header = (key: string, raw: string) => withUnknown(Buffer.concat([...(key ? [ld(1, Buffer.from(key))] : []), ld(3, Buffer.from(raw))]));
    const headerMap = withUnknown(Buffer.concat([ld(1, header('x-a', '1')), ld(1, header('', 'empty name')), ld(1, header('x-a', '2'))]));
    const mapEntry = withUnknown(Buffer.concat([ld(1, Buffer.from('x-m')), ld(2, Buffer.from('m'))]));
    const http = withUnknown(Buffer.concat([ld(2, Buffer.from('POST')), ld(4, Buffer.from('/p')), ld(3, mapEntry), ld(13, headerMap), ld(12, Buffer.from('{}'))]));
    const request = withUnknown(ld(2, http));
    const socketAddress = withUnknown(ld(2, Buffer.from('192.0.2.7')));
    const address = withUnknown(ld(1, socketAddress));
    const peer = withUnknown(ld(1, address));
    const attributes = withUnknown(Buffer.concat([ld(1, peer), ld(4, request)]));
    const bytes = withUnknown(ld(1, attributes));
    expect(lean(bytes)).toEqual(reference(bytes));
    expect(lean(bytes)).toMatchObject({ method: 'POST', path: '/p', names: ['x-a', '', 'x-a'], values: ['1,2', 'empty name', '1,2'], body: Buffer.from('{}'), peer: '192.0.2.7' });
    // The headers map alone (no header_map), its entry carrying unknown fields too.
    const mapOnly = ld(1, withUnknown(ld(4, withUnknown(ld(2, withUnknown(ld(3, mapEntry)))))));
    expect(lean(mapOnly)).toEqual(reference(mapOnly));
    expect(lean(mapOnly)).toMatchObject({ names: ['x-m'], values: ['m'] });
  });
});
