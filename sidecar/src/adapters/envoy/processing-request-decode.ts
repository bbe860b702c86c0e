import { Metadata, type HeaderMap, type HeaderValue } from '../../generated/envoy/config/core/v3/base.js';
import {
  ProcessingRequest,
  ProtocolConfiguration,
  type HttpBody,
  type HttpHeaders,
  type HttpTrailers,
} from '../../generated/envoy/service/ext_proc/v3/external_processor.js';
import { Wire } from './wire.js';

/**
 * Envoy attaches the forwarded dynamic metadata (and any attributes) to every
 * ext_proc message, but the sidecar reads them only when an exchange starts
 * (the request phase). Decoding those google.protobuf.Struct values again for
 * each response header and body message was the largest single cost per
 * streamed chunk, so on a response-phase message they are skipped unread
 * (no metadata, no attributes).
 *
 * On a request-phase message the metadata is kept as bytes and decoded by
 * `forwardedMetadata` when first asked for: when ext_authz ran in this
 * process, the exchange starts from what it admitted (AdmissionCache) and
 * never asks. (`metadataContext` itself stays undefined: a getter on the
 * message made every message slower to build than the decode it saved.)
 *
 * The phase itself (headers, a body, trailers) is read here too, to the
 * generated decoder's objects, but with header values and body bytes as views
 * of the message's own Buffer (the generated decoder copies each, and reads
 * each header name through TextDecoder): a response's headers took 3.4 µs
 * that way. Every other field decodes exactly as ProcessingRequest.decode
 * decodes it (a field written twice: the later one), and a tag this decoder
 * does not expect, at any level, sends the whole message to the generated
 * decoder.
 */
export function decodeProcessingRequest(bytes: Uint8Array): ProcessingRequest {
  const w = new Wire(bytes);
  const reader = w.r;
  let metadata: Uint8Array | undefined;
  let responsePhase = false;
  // The generated decoder's empty message, field for field (its createBase is not exported).
  const m: ProcessingRequest = {
    requestHeaders: undefined,
    responseHeaders: undefined,
    requestBody: undefined,
    responseBody: undefined,
    requestTrailers: undefined,
    responseTrailers: undefined,
    metadataContext: undefined,
    attributes: {},
    observabilityMode: false,
    protocolConfig: undefined,
  };
  while (reader.pos < reader.len) {
    switch (reader.uint32()) {
      case 18: // request_headers = 2
        if (!(m.requestHeaders = httpHeaders(w))) return generated(bytes);
        break;
      case 26: // response_headers = 3
        if (!(m.responseHeaders = httpHeaders(w))) return generated(bytes);
        responsePhase = true;
        break;
      case 34: // request_body = 4
        if (!(m.requestBody = httpBody(w))) return generated(bytes);
        break;
      case 42: // response_body = 5
        if (!(m.responseBody = httpBody(w))) return generated(bytes);
        responsePhase = true;
        break;
      case 50: // request_trailers = 6
        if (!(m.requestTrailers = httpTrailers(w))) return generated(bytes);
        break;
      case 58: // response_trailers = 7
        if (!(m.responseTrailers = httpTrailers(w))) return generated(bytes);
        responsePhase = true;
        break;
      case 66: // metadata_context = 8: kept as bytes
        metadata = w.bytes();
        break;
      case 74: {
        // attributes = 9 (Envoy writes them after the phase: on a response phase, skipped)
        if (responsePhase) {
          w.bytes();
          break;
        }
        if (!attributesEntry(w, m.attributes)) return generated(bytes);
        break;
      }
      case 80: // observability_mode = 10
        m.observabilityMode = reader.bool();
        break;
      case 90: // protocol_config = 11
        m.protocolConfig = ProtocolConfiguration.decode(reader, reader.uint32());
        break;
      default:
        return generated(bytes);
    }
  }
  if (responsePhase) m.attributes = {};
  else if (metadata) (m as WithKept)[KEPT] = metadata;
  return m;
}

/** Where a request-phase message keeps its metadata_context's bytes until asked for (a symbol: not a field of the message). */
const KEPT = Symbol('metadata_context bytes');
type WithKept = ProcessingRequest & { [KEPT]?: Uint8Array };

/** The dynamic metadata Envoy forwarded with a request-phase message (decoded on first ask, then kept on the message). */
export function forwardedMetadata(req: ProcessingRequest): ProcessingRequest['metadataContext'] {
  if (req.metadataContext) return req.metadataContext;
  const bytes = (req as WithKept)[KEPT];
  if (!bytes) return undefined;
  req.metadataContext = Metadata.decode(bytes);
  return req.metadataContext;
}

/** The generated decoder's message, with a response phase's metadata and attributes dropped as above. */
function generated(buf: Uint8Array): ProcessingRequest {
  const m = ProcessingRequest.decode(buf);
  return m.responseHeaders || m.responseBody || m.responseTrailers ? { ...m, metadataContext: undefined, attributes: {} } : m;
}

/*
 * The phases, each from the length-delimited value at the reader, read as the
 * generated decoders read them (a field that runs past its message's end is
 * read whole, and reading goes on from there). undefined: a field this reader
 * does not expect (the caller hands the whole message to the generated decoder).
 */

/** HttpHeaders { headers = 1: HeaderMap, end_of_stream = 3 } (the deprecated attributes = 2: not lean). */
function httpHeaders(w: Wire): HttpHeaders | undefined {
  const end = w.end();
  const out: HttpHeaders = { headers: undefined, attributes: {}, endOfStream: false };
  while (w.r.pos < end) {
    const tag = w.tag();
    if (tag === 10) {
      if (!(out.headers = headerMap(w))) return undefined;
    } else if (tag === 24) out.endOfStream = w.r.bool();
    else return undefined;
  }
  return out;
}

/** HttpTrailers { trailers = 1: HeaderMap }. */
function httpTrailers(w: Wire): HttpTrailers | undefined {
  const end = w.end();
  const out: HttpTrailers = { trailers: undefined };
  while (w.r.pos < end) {
    if (w.tag() !== 10 || !(out.trailers = headerMap(w))) return undefined;
  }
  return out;
}

/** HeaderMap { headers = 1: repeated HeaderValue { key = 1, value = 2, raw_value = 3 } }. */
function headerMap(w: Wire): HeaderMap | undefined {
  const end = w.end();
  const headers: HeaderValue[] = [];
  while (w.r.pos < end) {
    if (w.tag() !== 10) return undefined;
    const valueEnd = w.end();
    const h: HeaderValue = { key: '', value: '', rawValue: EMPTY };
    while (w.r.pos < valueEnd) {
      const tag = w.tag();
      if (tag === 10) h.key = w.string();
      else if (tag === 18) h.value = w.string();
      else if (tag === 26) h.rawValue = w.bytes();
      else return undefined;
    }
    headers.push(h);
  }
  return { headers };
}

/**
 * One entry of attributes = 9: map<string, Struct> { key = 1, value = 2 }, put
 * into `into` as the generated decoder would (an entry with no value is left
 * out). Only Structs of strings are read here (Envoy's request attributes:
 * request.id, request.path, request.method); false for anything else.
 */
function attributesEntry(w: Wire, into: ProcessingRequest['attributes']): boolean {
  const end = w.end();
  let key = '';
  let value: Record<string, string> | undefined;
  while (w.r.pos < end) {
    const tag = w.tag();
    if (tag === 10) key = w.string();
    else if (tag === 18) {
      if (!(value = structOfStrings(w))) return false;
    } else return false;
  }
  if (value !== undefined) into[key] = value;
  return true;
}

/** Struct { fields = 1: map<string, Value> { key = 1, value = 2 } } whose every Value is a string_value; undefined otherwise. */
function structOfStrings(w: Wire): Record<string, string> | undefined {
  const end = w.end();
  const out: Record<string, string> = {};
  while (w.r.pos < end) {
    if (w.tag() !== 10) return undefined;
    const entryEnd = w.end();
    let key = '';
    let value: string | undefined;
    while (w.r.pos < entryEnd) {
      const tag = w.tag();
      if (tag === 10) key = w.string();
      else if (tag !== 18 || (value = stringValue(w)) === undefined) return undefined;
    }
    if (value !== undefined) out[key] = value;
  }
  return out;
}

/** Value { string_value = 3 } (the last one written, as for any oneof); undefined for any other kind, or none. */
function stringValue(w: Wire): string | undefined {
  const end = w.end();
  let s: string | undefined;
  while (w.r.pos < end) {
    if (w.tag() !== 26) return undefined;
    s = w.string();
  }
  return s;
}

/** HttpBody { body = 1, end_of_stream = 2, end_of_stream_without_message = 3, grpc_message_compressed = 4 }. */
function httpBody(w: Wire): HttpBody | undefined {
  const end = w.end();
  const out: HttpBody = { body: EMPTY, endOfStream: false, endOfStreamWithoutMessage: false, grpcMessageCompressed: false };
  while (w.r.pos < end) {
    const tag = w.tag();
    if (tag === 10) out.body = w.bytes();
    else if (tag === 16) out.endOfStream = w.r.bool();
    else if (tag === 24) out.endOfStreamWithoutMessage = w.r.bool();
    else if (tag === 32) out.grpcMessageCompressed = w.r.bool();
    else return undefined;
  }
  return out;
}

/** The empty bytes of a field not written (read only, like every view above). */
const EMPTY: Buffer = Buffer.alloc(0);
