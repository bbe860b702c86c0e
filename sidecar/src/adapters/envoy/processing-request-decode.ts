import { BinaryReader } from '@bufbuild/protobuf/wire';
import { Metadata_TypedFilterMetadataEntry, type Metadata } from '../../generated/envoy/config/core/v3/base.js';
import { ProcessingRequest } from '../../generated/envoy/service/ext_proc/v3/external_processor.js';
import { decodeStructEntry } from './struct-decode.js';

/**
 * Envoy attaches the forwarded dynamic metadata (and any attributes) to every
 * ext_proc message, but the sidecar reads them only when an exchange starts
 * (the request phase). Decoding those google.protobuf.Struct values again for
 * each response header and body message was the largest single cost per
 * streamed chunk, so for response-phase messages they are left undecoded. On
 * request-phase messages they go through the lean Struct decoder
 * (struct-decode.ts) instead of the generated one. Every other field decodes
 * exactly as ProcessingRequest.decode would, and the result is the same.
 */

/** response_headers, response_body, response_trailers */
const RESPONSE_PHASES = new Set([3, 5, 7]);
const METADATA_CONTEXT = 8;
const ATTRIBUTES = 9;

export function decodeProcessingRequest(buf: Uint8Array): ProcessingRequest {
  const reader = new BinaryReader(buf);
  const kept: Array<[number, number]> = [];
  const startOnly: Array<[number, number]> = [];
  let responsePhase = false;
  while (reader.pos < reader.len) {
    const start = reader.pos;
    const [fieldNo, wireType] = reader.tag();
    reader.skip(wireType, fieldNo);
    if (RESPONSE_PHASES.has(fieldNo)) responsePhase = true;
    if ((fieldNo === METADATA_CONTEXT || fieldNo === ATTRIBUTES) && wireType === 2) {
      startOnly.push([fieldNo, start]);
      continue;
    }
    const last = kept[kept.length - 1];
    if (last && last[1] === start) last[1] = reader.pos;
    else kept.push([start, reader.pos]);
  }
  if (startOnly.length === 0) return ProcessingRequest.decode(buf);
  // Envoy writes fields in number order, so what is kept is normally one run: no copy.
  const lean =
    kept.length === 0 ? buf.subarray(0, 0) : kept.length === 1 ? buf.subarray(kept[0]![0], kept[0]![1]) : Buffer.concat(kept.map(([a, b]) => buf.subarray(a, b)));
  const msg = ProcessingRequest.decode(lean);
  if (!responsePhase) for (const [fieldNo, start] of startOnly) decodeStartOnly(msg, buf, fieldNo, start);
  return msg;
}

/** metadata_context (the last one wins, as in the generated decoder) or one attributes entry. */
function decodeStartOnly(msg: ProcessingRequest, buf: Uint8Array, fieldNo: number, start: number): void {
  const reader = new BinaryReader(buf);
  reader.pos = start;
  reader.uint32(); // the tag
  const end = reader.uint32() + reader.pos;
  if (fieldNo === ATTRIBUTES) {
    const entry = decodeStructEntry(reader, end - reader.pos);
    if (entry.value !== undefined) msg.attributes[entry.key] = entry.value;
    return;
  }
  const md: Metadata = { filterMetadata: {}, typedFilterMetadata: {} };
  while (reader.pos < end) {
    const tag = reader.uint32();
    if (tag === 10) {
      const entry = decodeStructEntry(reader, reader.uint32());
      if (entry.value !== undefined) md.filterMetadata[entry.key] = entry.value;
    } else if (tag === 18) {
      const entry = Metadata_TypedFilterMetadataEntry.decode(reader, reader.uint32());
      if (entry.value !== undefined) md.typedFilterMetadata[entry.key] = entry.value;
    } else {
      if ((tag & 7) === 4 || tag === 0) break;
      reader.skip(tag & 7);
    }
  }
  msg.metadataContext = md;
}
