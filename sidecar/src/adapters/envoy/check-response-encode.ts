import type { HeaderValueOption } from '../../generated/envoy/config/core/v3/base.js';
import { CheckResponse } from '../../generated/envoy/service/auth/v3/external_auth.js';
import { reusedWriterSerializer } from '../grpc-codec.js';
import { bytes, field, headerOptionSize, leanHeader, str, structBytes, tagLength, utf8, writeHeaderOption } from './wire-write.js';

/**
 * ext_authz's answer, encoded without the generated code's writer for the
 * answers the gateway gives on every request: an OK status, headers to set,
 * names to remove, and dynamic metadata. The generated encoder forks a writer
 * per nested message and wraps the metadata in Struct and Value objects
 * first; here the sizes are summed and the bytes written once into a buffer
 * of exactly that size, and headers made by `constantHeader` (the provider
 * headers, the same on every request) are copied already encoded. The bytes
 * are the generated encoder's, byte for byte (a property test holds it to
 * that); any other answer (a refusal, a field this path does not write) goes
 * to the generated encoder.
 */

/** Where a constant header keeps its encoded HeaderValueOption (its own tag and length not included). */
const ENCODED = Symbol('encoded');
type Constant = HeaderValueOption & { readonly [ENCODED]?: Buffer };

/** A header that ext_authz sets with the same value on many answers: encoded once, here. */
export function constantHeader(key: string, value: string): HeaderValueOption {
  const h = { header: Object.freeze({ key, value, rawValue: Buffer.alloc(0) }), append: undefined, appendAction: 0, keepEmptyValue: false };
  const out = Buffer.allocUnsafe(headerOptionSize(h));
  writeHeaderOption(out, 0, h);
  return Object.freeze({ ...h, [ENCODED]: out });
}

const preEncoded = (h: HeaderValueOption): Buffer | undefined => (h as Constant)[ENCODED];

const generated = reusedWriterSerializer(CheckResponse.encode);

/** The gRPC serializer of ext_authz answers. */
export function encodeCheckResponse(message: CheckResponse): Buffer {
  return (leanShape(message) && encodeLean(message)) || generated(message);
}

/** Whether this answer is written here (else by the generated encoder, to the same bytes). */
export function encodesLean(m: CheckResponse): boolean {
  return leanShape(m) && (m.dynamicMetadata === undefined || structBytes(m.dynamicMetadata) !== null);
}

/** Every part but the metadata is of the lean kind (encodeLean answers for the metadata). */
function leanShape(m: CheckResponse): boolean {
  if (m.deniedResponse !== undefined || m.errorResponse !== undefined) return false;
  const s = m.status;
  if (s !== undefined && (s.code !== 0 || s.message !== '' || s.details.length !== 0)) return false;
  const ok = m.okResponse;
  if (ok !== undefined) {
    if (ok.dynamicMetadata !== undefined || ok.responseHeadersToAdd.length || ok.queryParametersToSet.length || ok.queryParametersToRemove.length) return false;
    for (const h of ok.headers) if (!preEncoded(h) && !leanHeader(h)) return false;
  }
  return true;
}

const optionSize = (h: HeaderValueOption): number => preEncoded(h)?.length ?? headerOptionSize(h);

/** The answer's bytes, or null when its metadata holds what a lean Struct cannot (the generated encoder writes it). */
function encodeLean(m: CheckResponse): Buffer | null {
  const ok = m.okResponse;
  let okSize = 0;
  if (ok) {
    for (const h of ok.headers) okSize += field(optionSize(h));
    for (const n of ok.headersToRemove) okSize += field(utf8(n));
  }
  const md = m.dynamicMetadata === undefined ? undefined : structBytes(m.dynamicMetadata);
  if (md === null) return null;
  const total = (m.status ? 2 : 0) + (ok ? field(okSize) : 0) + (md ? field(md.length) : 0);
  const out = Buffer.allocUnsafe(total);
  let at = 0;
  if (m.status) {
    out[at++] = 0x0a; // status = 1; an OK status has no fields
    out[at++] = 0;
  }
  if (ok) {
    at = tagLength(out, at, 0x1a, okSize); // ok_response = 3
    for (const h of ok.headers) {
      const pre = preEncoded(h);
      at = pre ? bytes(out, at, 0x12, pre) : writeHeaderOption(out, tagLength(out, at, 0x12, headerOptionSize(h)), h); // headers = 2
    }
    for (const n of ok.headersToRemove) at = str(out, at, 0x2a, n); // headers_to_remove = 5
  }
  if (md) at = bytes(out, at, 0x22, md); // dynamic_metadata = 4
  if (at !== total) throw new RangeError('CheckResponse size mismatch');
  return out;
}
