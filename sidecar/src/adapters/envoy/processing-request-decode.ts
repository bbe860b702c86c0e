import { BinaryReader } from '@bufbuild/protobuf/wire';
import { Metadata, type HeaderMap, type HeaderValue } from '../../generated/envoy/config/core/v3/base.js';
import {
  ProcessingRequest,
  ProcessingRequest_AttributesEntry,
  ProtocolConfiguration,
  type HttpBody,
  type HttpHeaders,
  type HttpTrailers,
} from '../../generated/envoy/service/ext_proc/v3/external_processor.js';

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
  // grpc-js hands over Buffers; other bytes are viewed as one, not copied.
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const reader = new BinaryReader(buf);
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
        if (!(m.requestHeaders = httpHeaders(reader, buf))) return generated(buf);
        break;
      case 26: // response_headers = 3
        if (!(m.responseHeaders = httpHeaders(reader, buf))) return generated(buf);
        responsePhase = true;
        break;
      case 34: // request_body = 4
        if (!(m.requestBody = httpBody(reader, buf))) return generated(buf);
        break;
      case 42: // response_body = 5
        if (!(m.responseBody = httpBody(reader, buf))) return generated(buf);
        responsePhase = true;
        break;
      case 50: // request_trailers = 6
        if (!(m.requestTrailers = httpTrailers(reader, buf))) return generated(buf);
        break;
      case 58: // response_trailers = 7
        if (!(m.responseTrailers = httpTrailers(reader, buf))) return generated(buf);
        responsePhase = true;
        break;
      case 66: // metadata_context = 8: kept as bytes
        metadata = lengthDelimited(reader, buf);
        break;
      case 74: {
        // attributes = 9 (Envoy writes them after the phase: on a response phase, skipped)
        if (responsePhase) {
          lengthDelimited(reader, buf);
          break;
        }
        const entry = ProcessingRequest_AttributesEntry.decode(reader, reader.uint32());
        if (entry.value !== undefined) m.attributes[entry.key] = entry.value;
        break;
      }
      case 80: // observability_mode = 10
        m.observabilityMode = reader.bool();
        break;
      case 90: // protocol_config = 11
        m.protocolConfig = ProtocolConfiguration.decode(reader, reader.uint32());
        break;
      default:
        return generated(buf);
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

/** The end of the length-delimited value at the reader (its length is read). */
function endOf(reader: BinaryReader): number {
  const end = reader.uint32() + reader.pos;
  if (end > reader.len) throw new RangeError('premature EOF');
  return end;
}

/** A string field's value (UTF-8, as TextDecoder reads it: malformed bytes become U+FFFD). */
function text(reader: BinaryReader, buf: Buffer): string {
  const end = endOf(reader);
  const s = buf.toString('utf8', reader.pos, end);
  reader.pos = end;
  return s;
}

/** A bytes field's value: a view of the message, not a copy. */
function view(reader: BinaryReader, buf: Buffer): Buffer {
  const end = endOf(reader);
  const out = buf.subarray(reader.pos, end);
  reader.pos = end;
  return out;
}

/** HttpHeaders { headers = 1: HeaderMap, end_of_stream = 3 } (the deprecated attributes = 2: not lean). */
function httpHeaders(reader: BinaryReader, buf: Buffer): HttpHeaders | undefined {
  const end = endOf(reader);
  const out: HttpHeaders = { headers: undefined, attributes: {}, endOfStream: false };
  while (reader.pos < end) {
    const tag = reader.uint32();
    if (tag === 10) {
      if (!(out.headers = headerMap(reader, buf))) return undefined;
    } else if (tag === 24) out.endOfStream = reader.bool();
    else return undefined;
  }
  return out;
}

/** HttpTrailers { trailers = 1: HeaderMap }. */
function httpTrailers(reader: BinaryReader, buf: Buffer): HttpTrailers | undefined {
  const end = endOf(reader);
  const out: HttpTrailers = { trailers: undefined };
  while (reader.pos < end) {
    if (reader.uint32() !== 10 || !(out.trailers = headerMap(reader, buf))) return undefined;
  }
  return out;
}

/** HeaderMap { headers = 1: repeated HeaderValue { key = 1, value = 2, raw_value = 3 } }. */
function headerMap(reader: BinaryReader, buf: Buffer): HeaderMap | undefined {
  const end = endOf(reader);
  const headers: HeaderValue[] = [];
  while (reader.pos < end) {
    if (reader.uint32() !== 10) return undefined;
    const valueEnd = endOf(reader);
    const h: HeaderValue = { key: '', value: '', rawValue: EMPTY };
    while (reader.pos < valueEnd) {
      const tag = reader.uint32();
      if (tag === 10) h.key = text(reader, buf);
      else if (tag === 18) h.value = text(reader, buf);
      else if (tag === 26) h.rawValue = view(reader, buf);
      else return undefined;
    }
    headers.push(h);
  }
  return { headers };
}

/** HttpBody { body = 1, end_of_stream = 2, end_of_stream_without_message = 3, grpc_message_compressed = 4 }. */
function httpBody(reader: BinaryReader, buf: Buffer): HttpBody | undefined {
  const end = endOf(reader);
  const out: HttpBody = { body: EMPTY, endOfStream: false, endOfStreamWithoutMessage: false, grpcMessageCompressed: false };
  while (reader.pos < end) {
    const tag = reader.uint32();
    if (tag === 10) out.body = view(reader, buf);
    else if (tag === 16) out.endOfStream = reader.bool();
    else if (tag === 24) out.endOfStreamWithoutMessage = reader.bool();
    else if (tag === 32) out.grpcMessageCompressed = reader.bool();
    else return undefined;
  }
  return out;
}

/** The empty bytes of a field not written (read only, like every view above). */
const EMPTY: Buffer = Buffer.alloc(0);

/** A length-delimited value's bytes (a view, not a copy); the reader moves past it. */
function lengthDelimited(reader: BinaryReader, buf: Uint8Array): Uint8Array {
  const length = reader.uint32();
  const start = reader.pos;
  const end = start + length;
  if (end > reader.len) throw new RangeError('premature EOF');
  reader.pos = end;
  return buf.subarray(start, end);
}
