import {
  ProcessingResponse,
  type BodyMutation,
  type CommonResponse,
  type HeaderMutation,
  type StreamedBodyResponse,
} from '../../generated/envoy/service/ext_proc/v3/external_processor.js';
import { reusedWriterSerializer } from '../grpc-codec.js';
import { bytes, field, headerOptionSize, leanHeader, leanStruct, str, structSize, tagLength, utf8, varintSize, writeHeaderOption, writeStruct, type LeanObject } from './wire-write.js';

/**
 * ext_proc's answers, encoded without the generated code's writer: what the
 * gateway sends for every message of an exchange (a header or body answer
 * with header edits, a replaced body or a streamed piece, the access log's
 * dynamic metadata on the last one). A streamed chunk's answer was four
 * nested writer forks, a copy of the piece into the writer, another to finish
 * it; here the sizes are summed, one buffer of exactly that size is taken and
 * the piece is copied into it once. Byte for byte the generated encoder's
 * output (a property test holds it to that); an immediate response, a mode
 * override or anything else this path does not write goes to the generated
 * encoder.
 */

const generated = reusedWriterSerializer(ProcessingResponse.encode);

/** The gRPC serializer of ext_proc answers. */
export function encodeProcessingResponse(message: ProcessingResponse): Buffer {
  return encodesLean(message) ? encodeLean(message) : generated(message);
}

/** The phases' answers in the generated encoder's order: field tag, and whether it is a trailers answer. */
const PHASES = [
  ['requestHeaders', 0x0a, false],
  ['responseHeaders', 0x12, false],
  ['requestBody', 0x1a, false],
  ['responseBody', 0x22, false],
  ['requestTrailers', 0x2a, true],
  ['responseTrailers', 0x32, true],
] as const;

/** Whether this answer is written here (else by the generated encoder, to the same bytes). */
export function encodesLean(m: ProcessingResponse): boolean {
  if (m.immediateResponse !== undefined || m.streamedImmediateResponse !== undefined || m.modeOverride !== undefined || m.overrideMessageTimeout !== undefined) return false;
  if (m.dynamicMetadata !== undefined && !leanStruct(m.dynamicMetadata)) return false;
  for (const [phase, , trailers] of PHASES) {
    const p = m[phase];
    if (p === undefined) continue;
    if (trailers) {
      const t = p as { headerMutation?: HeaderMutation };
      if (t.headerMutation && !leanMutation(t.headerMutation)) return false;
      continue;
    }
    const c = (p as { response?: CommonResponse }).response;
    if (c && (c.status < 0 || c.trailers !== undefined || (c.headerMutation && !leanMutation(c.headerMutation)))) return false;
  }
  return true;
}

const leanMutation = (h: HeaderMutation): boolean => h.setHeaders.every(leanHeader);

function mutationSize(h: HeaderMutation): number {
  let n = 0;
  for (const o of h.setHeaders) n += field(headerOptionSize(o));
  for (const r of h.removeHeaders) n += field(utf8(r));
  return n;
}

function streamedSize(s: StreamedBodyResponse): number {
  return (s.body.length ? field(s.body.length) : 0) + (s.endOfStream ? 2 : 0) + (s.endOfStreamWithoutMessage ? 2 : 0) + (s.grpcMessageCompressed ? 2 : 0);
}

function bodyMutationSize(b: BodyMutation): number {
  return (b.body !== undefined ? field(b.body.length) : 0) + (b.clearBody !== undefined ? 2 : 0) + (b.streamedResponse ? field(streamedSize(b.streamedResponse)) : 0);
}

function commonSize(c: CommonResponse): number {
  return (
    (c.status !== 0 ? 1 + varintSize(c.status) : 0) +
    (c.headerMutation ? field(mutationSize(c.headerMutation)) : 0) +
    (c.bodyMutation ? field(bodyMutationSize(c.bodyMutation)) : 0) +
    (c.clearRouteCache ? 2 : 0)
  );
}

/** A phase answer's bytes: { response = 1: CommonResponse } or, for trailers, { header_mutation = 1 }. */
function phaseSize(p: object, trailers: boolean): number {
  if (trailers) {
    const h = (p as { headerMutation?: HeaderMutation }).headerMutation;
    return h ? field(mutationSize(h)) : 0;
  }
  const c = (p as { response?: CommonResponse }).response;
  return c ? field(commonSize(c)) : 0;
}

function encodeLean(m: ProcessingResponse): Buffer {
  let total = 0;
  for (const [phase, , trailers] of PHASES) {
    const p = m[phase];
    if (p !== undefined) total += field(phaseSize(p, trailers));
  }
  const md = m.dynamicMetadata as LeanObject | undefined;
  const mdSize = md ? structSize(md) : 0;
  if (md) total += field(mdSize);
  if (m.requestDrain) total += 2;
  const out = Buffer.allocUnsafe(total);
  let at = 0;
  for (const [phase, tag, trailers] of PHASES) {
    const p = m[phase];
    if (p === undefined) continue;
    at = tagLength(out, at, tag, phaseSize(p, trailers));
    if (trailers) {
      const h = (p as { headerMutation?: HeaderMutation }).headerMutation;
      if (h) at = writeMutation(out, tagLength(out, at, 0x0a, mutationSize(h)), h);
      continue;
    }
    const c = (p as { response?: CommonResponse }).response;
    if (c) at = writeCommon(out, tagLength(out, at, 0x0a, commonSize(c)), c);
  }
  if (md) at = writeStruct(out, tagLength(out, at, 0x42, mdSize), md); // dynamic_metadata = 8
  if (m.requestDrain) {
    out[at++] = 0x60; // request_drain = 12
    out[at++] = 1;
  }
  if (at !== total) throw new RangeError('ProcessingResponse size mismatch');
  return out;
}

/** CommonResponse { status = 1, header_mutation = 2, body_mutation = 3, clear_route_cache = 5 }. */
function writeCommon(out: Buffer, at: number, c: CommonResponse): number {
  if (c.status !== 0) at = tagLength(out, at, 0x08, c.status);
  if (c.headerMutation) at = writeMutation(out, tagLength(out, at, 0x12, mutationSize(c.headerMutation)), c.headerMutation);
  const b = c.bodyMutation;
  if (b) {
    at = tagLength(out, at, 0x1a, bodyMutationSize(b));
    if (b.body !== undefined) at = bytes(out, at, 0x0a, b.body); // body = 1
    if (b.clearBody !== undefined) at = bool(out, at, 0x10, b.clearBody); // clear_body = 2
    const s = b.streamedResponse;
    if (s) {
      at = tagLength(out, at, 0x1a, streamedSize(s)); // streamed_response = 3
      if (s.body.length) at = bytes(out, at, 0x0a, s.body);
      if (s.endOfStream) at = bool(out, at, 0x10, true);
      if (s.endOfStreamWithoutMessage) at = bool(out, at, 0x18, true);
      if (s.grpcMessageCompressed) at = bool(out, at, 0x20, true);
    }
  }
  if (c.clearRouteCache) at = bool(out, at, 0x28, true);
  return at;
}

/** HeaderMutation { set_headers = 1, remove_headers = 2 }. */
function writeMutation(out: Buffer, at: number, h: HeaderMutation): number {
  for (const o of h.setHeaders) at = writeHeaderOption(out, tagLength(out, at, 0x0a, headerOptionSize(o)), o);
  for (const r of h.removeHeaders) at = str(out, at, 0x12, r);
  return at;
}

function bool(out: Buffer, at: number, tag: number, v: boolean): number {
  out[at++] = tag;
  out[at++] = v ? 1 : 0;
  return at;
}
