import { BinaryReader } from '@bufbuild/protobuf/wire';
import { Metadata } from '../../generated/envoy/config/core/v3/base.js';
import { ProcessingRequest } from '../../generated/envoy/service/ext_proc/v3/external_processor.js';

/**
 * Envoy attaches the forwarded dynamic metadata (and any attributes) to every
 * ext_proc message, but the sidecar reads them only when an exchange starts
 * (the request phase). Decoding those google.protobuf.Struct values again for
 * each response header and body message was the largest single cost per
 * streamed chunk, so for response-phase messages they are left undecoded.
 *
 * On a request-phase message the metadata is decoded when it is first read:
 * when ext_authz ran in this process, the exchange starts from what it
 * admitted (AdmissionCache) and never reads it.
 *
 * Every other field decodes exactly as ProcessingRequest.decode would.
 */

/** response_headers, response_body, response_trailers */
const RESPONSE_PHASES = new Set([3, 5, 7]);
const METADATA_CONTEXT = 8;
const ATTRIBUTES = 9;

export function decodeProcessingRequest(buf: Uint8Array): ProcessingRequest {
  const reader = new BinaryReader(buf);
  const kept: Array<[number, number]> = [];
  let responsePhase = false;
  let dropped = false;
  /** The one metadata_context field: where it starts (its tag), its value, its end. */
  let metadata: { start: number; value: number; end: number } | null = null;
  let metadataFields = 0;
  while (reader.pos < reader.len) {
    const start = reader.pos;
    const [fieldNo, wireType] = reader.tag();
    const value = reader.pos;
    reader.skip(wireType, fieldNo);
    if (fieldNo === METADATA_CONTEXT && ++metadataFields === 1) metadata = { start, value, end: reader.pos };
    if (RESPONSE_PHASES.has(fieldNo)) responsePhase = true;
    if (fieldNo === METADATA_CONTEXT || fieldNo === ATTRIBUTES) {
      dropped = true;
      continue;
    }
    const last = kept[kept.length - 1];
    if (last && last[1] === start) last[1] = reader.pos;
    else kept.push([start, reader.pos]);
  }
  if (responsePhase) {
    if (!dropped) return ProcessingRequest.decode(buf);
    // Envoy writes fields in number order, so what is kept is normally one run: no copy.
    const lean = kept.length === 1 ? buf.subarray(kept[0]![0], kept[0]![1]) : Buffer.concat(kept.map(([a, b]) => buf.subarray(a, b)));
    return ProcessingRequest.decode(lean);
  }
  // A repeated metadata field (its parts merge) is left to the generated decoder.
  if (!metadata || metadataFields > 1) return ProcessingRequest.decode(buf);
  return withLazyMetadata(buf, metadata);
}

/**
 * The message without its metadata_context, read as two runs of one reader (the
 * body is not copied to join them), then the metadata as a property decoded on
 * first read. The runs join as the generated decoder reads one message: the
 * attributes map gains the later entries, a later message field replaces an
 * earlier one; a bool set in the first run cannot be told from one the second
 * run leaves unset, so then the whole message goes to the generated decoder.
 */
function withLazyMetadata(buf: Uint8Array, md: { start: number; value: number; end: number }): ProcessingRequest {
  const reader = new BinaryReader(buf);
  const head = ProcessingRequest.decode(reader, md.start);
  reader.pos = md.end;
  const tail = ProcessingRequest.decode(reader, buf.length - md.end);
  for (const key of Object.keys(tail) as Array<keyof ProcessingRequest>) {
    if (key === 'attributes') Object.assign(head.attributes, tail.attributes);
    else if (key === 'observabilityMode') {
      // A bool's last value wins; one written in the head too cannot be told from a default.
      if (head.observabilityMode) return ProcessingRequest.decode(buf);
      head.observabilityMode = tail.observabilityMode;
    } else if (tail[key] !== undefined) (head as unknown as Record<string, unknown>)[key] = tail[key]; // a later message field replaces, as in the generated decoder
  }
  let decoded: ProcessingRequest['metadataContext'] | null = null;
  Object.defineProperty(head, 'metadataContext', {
    enumerable: true,
    configurable: true,
    get: () => {
      if (decoded) return decoded;
      const r = new BinaryReader(buf.subarray(md.value, md.end));
      decoded = Metadata.decode(r, r.uint32());
      return decoded;
    },
  });
  return head;
}
