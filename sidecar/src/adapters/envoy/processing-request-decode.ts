import { BinaryReader } from '@bufbuild/protobuf/wire';
import { Metadata } from '../../generated/envoy/config/core/v3/base.js';
import {
  HttpBody,
  HttpHeaders,
  HttpTrailers,
  ProcessingRequest,
  ProcessingRequest_AttributesEntry,
  ProtocolConfiguration,
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
 * Every other field decodes exactly as ProcessingRequest.decode decodes it
 * (the same nested decoders; a field written twice: the later one), and a
 * tag this decoder does not expect sends the whole message to the generated
 * decoder.
 */
export function decodeProcessingRequest(buf: Uint8Array): ProcessingRequest {
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
        m.requestHeaders = HttpHeaders.decode(reader, reader.uint32());
        break;
      case 26: // response_headers = 3
        m.responseHeaders = HttpHeaders.decode(reader, reader.uint32());
        responsePhase = true;
        break;
      case 34: // request_body = 4
        m.requestBody = HttpBody.decode(reader, reader.uint32());
        break;
      case 42: // response_body = 5
        m.responseBody = HttpBody.decode(reader, reader.uint32());
        responsePhase = true;
        break;
      case 50: // request_trailers = 6
        m.requestTrailers = HttpTrailers.decode(reader, reader.uint32());
        break;
      case 58: // response_trailers = 7
        m.responseTrailers = HttpTrailers.decode(reader, reader.uint32());
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
        return withoutStartOnly(ProcessingRequest.decode(buf));
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
function withoutStartOnly(m: ProcessingRequest): ProcessingRequest {
  return m.responseHeaders || m.responseBody || m.responseTrailers ? { ...m, metadataContext: undefined, attributes: {} } : m;
}

/** A length-delimited value's bytes (a view, not a copy); the reader moves past it. */
function lengthDelimited(reader: BinaryReader, buf: Uint8Array): Uint8Array {
  const length = reader.uint32();
  const start = reader.pos;
  const end = start + length;
  if (end > reader.len) throw new RangeError('premature EOF');
  reader.pos = end;
  return buf.subarray(start, end);
}
