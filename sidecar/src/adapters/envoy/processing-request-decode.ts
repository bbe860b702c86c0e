import { BinaryReader } from '@bufbuild/protobuf/wire';
import { ProcessingRequest } from '../../generated/envoy/service/ext_proc/v3/external_processor.js';

/**
 * Envoy attaches the forwarded dynamic metadata (and any attributes) to every
 * ext_proc message, but the sidecar reads them only when an exchange starts
 * (the request phase). Decoding those google.protobuf.Struct values again for
 * each response header and body message was the largest single cost per
 * streamed chunk, so for response-phase messages they are left undecoded.
 * Every other field decodes exactly as ProcessingRequest.decode would.
 */

/** response_headers, response_body, response_trailers */
const RESPONSE_PHASES = new Set([3, 5, 7]);
/** metadata_context, attributes */
const START_ONLY = new Set([8, 9]);

export function decodeProcessingRequest(buf: Uint8Array): ProcessingRequest {
  const reader = new BinaryReader(buf);
  const kept: Array<[number, number]> = [];
  let responsePhase = false;
  let dropped = false;
  while (reader.pos < reader.len) {
    const start = reader.pos;
    const [fieldNo, wireType] = reader.tag();
    reader.skip(wireType, fieldNo);
    if (RESPONSE_PHASES.has(fieldNo)) responsePhase = true;
    if (START_ONLY.has(fieldNo)) {
      dropped = true;
      continue;
    }
    const last = kept[kept.length - 1];
    if (last && last[1] === start) last[1] = reader.pos;
    else kept.push([start, reader.pos]);
  }
  if (!responsePhase || !dropped) return ProcessingRequest.decode(buf);
  // Envoy writes fields in number order, so what is kept is normally one run: no copy.
  const lean = kept.length === 1 ? buf.subarray(kept[0]![0], kept[0]![1]) : Buffer.concat(kept.map(([a, b]) => buf.subarray(a, b)));
  return ProcessingRequest.decode(lean);
}
