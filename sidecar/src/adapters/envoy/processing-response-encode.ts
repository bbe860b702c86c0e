import {
  ProcessingResponse,
  type BodyMutation,
  type CommonResponse,
  type HeaderMutation,
  type StreamedBodyResponse,
} from '../../generated/envoy/service/ext_proc/v3/external_processor.js';
import { reusedWriterSerializer } from '../grpc-codec.js';
import { bytes, field, headerOptionSize, leanHeader, str, structBytes, tagLength, utf8, varintSize, writeHeaderOption } from './wire-write.js';

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
  return (leanShape(message) && encodeLean(message)) || generated(message);
}

/** Whether this answer is written here (else by the generated encoder, to the same bytes). */
export function encodesLean(m: ProcessingResponse): boolean {
  return leanShape(m) && (m.dynamicMetadata === undefined || structBytes(m.dynamicMetadata) !== null);
}

/** A header or body answer: { response = 1: CommonResponse }. */
type PhaseAnswer = { readonly response?: CommonResponse | undefined };
/** A trailers answer: { header_mutation = 1 }. */
type TrailersAnswer = { readonly headerMutation?: HeaderMutation | undefined };

/** Every part but the metadata is of the lean kind (encodeLean answers for the metadata). */
function leanShape(m: ProcessingResponse): boolean {
  if (m.immediateResponse !== undefined || m.streamedImmediateResponse !== undefined || m.modeOverride !== undefined || m.overrideMessageTimeout !== undefined) return false;
  return (
    leanPhase(m.requestHeaders) &&
    leanPhase(m.responseHeaders) &&
    leanPhase(m.requestBody) &&
    leanPhase(m.responseBody) &&
    leanTrailers(m.requestTrailers) &&
    leanTrailers(m.responseTrailers)
  );
}

function leanPhase(p: PhaseAnswer | undefined): boolean {
  const c = p?.response;
  return !c || (c.status >= 0 && c.trailers === undefined && (!c.headerMutation || leanMutation(c.headerMutation)));
}

const leanTrailers = (t: TrailersAnswer | undefined): boolean => !t?.headerMutation || leanMutation(t.headerMutation);

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

/**
 * A header, body or trailers answer holds one optional message at field 1: a
 * phase's `response` (CommonResponse), a trailers answer's `header_mutation`.
 * Both are sized and written by the same two functions, given the inner
 * message's own size and writer.
 */
interface Inner<T> {
  size(v: T): number;
  write(out: Buffer, at: number, v: T): number;
}
// Function declarations below (hoisted).
const COMMON: Inner<CommonResponse> = { size: commonSize, write: writeCommon };
const MUTATION: Inner<HeaderMutation> = { size: mutationSize, write: writeMutation };

/** The answer's bytes without its own tag and length (`outer`), and its inner message's (`inner`). */
function answerSizes<T>(inner: T | undefined, kind: Inner<T>): { outer: number; inner: number } {
  const n = inner ? kind.size(inner) : 0;
  return { outer: inner ? field(n) : 0, inner: n };
}

/** The answer's bytes with its tag and length; 0 when there is no answer. */
function sized<T>(answer: object | undefined, inner: T | undefined, kind: Inner<T>): number {
  return answer === undefined ? 0 : field(answerSizes(inner, kind).outer);
}

function writeAnswer<T>(out: Buffer, at: number, tag: number, answer: object | undefined, inner: T | undefined, kind: Inner<T>): number {
  if (answer === undefined) return at;
  const size = answerSizes(inner, kind);
  at = tagLength(out, at, tag, size.outer);
  return inner ? kind.write(out, tagLength(out, at, 0x0a, size.inner), inner) : at;
}

/** The answer's bytes, or null when its metadata holds what a lean Struct cannot (the generated encoder writes it). */
function encodeLean(m: ProcessingResponse): Buffer | null {
  const md = m.dynamicMetadata === undefined ? undefined : structBytes(m.dynamicMetadata);
  if (md === null) return null;
  const total =
    sized(m.requestHeaders, m.requestHeaders?.response, COMMON) +
    sized(m.responseHeaders, m.responseHeaders?.response, COMMON) +
    sized(m.requestBody, m.requestBody?.response, COMMON) +
    sized(m.responseBody, m.responseBody?.response, COMMON) +
    sized(m.requestTrailers, m.requestTrailers?.headerMutation, MUTATION) +
    sized(m.responseTrailers, m.responseTrailers?.headerMutation, MUTATION) +
    (md ? field(md.length) : 0) +
    (m.requestDrain ? 2 : 0);
  const out = Buffer.allocUnsafe(total);
  // The fields in the generated encoder's order (by field number).
  let at = writeAnswer(out, 0, 0x0a, m.requestHeaders, m.requestHeaders?.response, COMMON); // request_headers = 1
  at = writeAnswer(out, at, 0x12, m.responseHeaders, m.responseHeaders?.response, COMMON); // response_headers = 2
  at = writeAnswer(out, at, 0x1a, m.requestBody, m.requestBody?.response, COMMON); // request_body = 3
  at = writeAnswer(out, at, 0x22, m.responseBody, m.responseBody?.response, COMMON); // response_body = 4
  at = writeAnswer(out, at, 0x2a, m.requestTrailers, m.requestTrailers?.headerMutation, MUTATION); // request_trailers = 5
  at = writeAnswer(out, at, 0x32, m.responseTrailers, m.responseTrailers?.headerMutation, MUTATION); // response_trailers = 6
  if (md) at = bytes(out, at, 0x42, md); // dynamic_metadata = 8
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
