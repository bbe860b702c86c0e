import type { HeaderValueOption } from '../../generated/envoy/config/core/v3/base.js';
import { CheckResponse } from '../../generated/envoy/service/auth/v3/external_auth.js';
import { reusedWriterSerializer } from '../grpc-codec.js';

/**
 * ext_authz's answer, encoded without the generated code's writer for the
 * answers the gateway gives on every request: an OK status, headers to set
 * (plain `value`, nothing else), names to remove, and dynamic metadata of
 * strings. The generated encoder forks a writer per nested message and wraps
 * the metadata in Struct and Value objects first; here the sizes are summed
 * and the bytes written once into a buffer of exactly that size, and headers
 * made by `constantHeader` (the provider headers, the same on every request)
 * are copied already encoded. The bytes are the generated encoder's, byte
 * for byte (a property test holds it to that); any other answer (a refusal,
 * a field this path does not write) goes to the generated encoder.
 */

/** The encoded HeaderValueOption of each constant header (field tag and length not included). */
const preEncoded = new WeakMap<HeaderValueOption, Buffer>();

/** A header that ext_authz sets with the same value on many answers: encoded once, here. */
export function constantHeader(key: string, value: string): HeaderValueOption {
  const h: HeaderValueOption = Object.freeze({ header: Object.freeze({ key, value, rawValue: Buffer.alloc(0) }), append: undefined, appendAction: 0, keepEmptyValue: false });
  const out = Buffer.allocUnsafe(headerSize(key, value));
  writeHeader(out, 0, key, value);
  preEncoded.set(h, out);
  return h;
}

const generated = reusedWriterSerializer(CheckResponse.encode);

/** The gRPC serializer of ext_authz answers. */
export function encodeCheckResponse(message: CheckResponse): Buffer {
  return isLean(message) ? encodeLean(message) : generated(message);
}

function isLean(m: CheckResponse): boolean {
  if (m.deniedResponse !== undefined || m.errorResponse !== undefined) return false;
  const s = m.status;
  if (s !== undefined && (s.code !== 0 || s.message !== '' || s.details.length !== 0)) return false;
  const ok = m.okResponse;
  if (ok !== undefined) {
    if (ok.dynamicMetadata !== undefined || ok.responseHeadersToAdd.length || ok.queryParametersToSet.length || ok.queryParametersToRemove.length) return false;
    for (const h of ok.headers) {
      if (preEncoded.has(h)) continue;
      if (!h.header || h.header.rawValue.length !== 0 || h.append !== undefined || h.appendAction !== 0 || h.keepEmptyValue) return false;
    }
  }
  const md = m.dynamicMetadata;
  if (md !== undefined) for (const k in md) if (typeof md[k] !== 'string' && md[k] !== undefined) return false;
  return true;
}

const varintSize = (n: number): number => (n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : n < 0x10000000 ? 4 : 5);
/** A length-delimited field of `n` bytes, with its one-byte tag and its length. */
const field = (n: number): number => 1 + varintSize(n) + n;
/** A string's UTF-8 length; short ones counted here (a call into Buffer costs more than the loop). */
function utf8(s: string): number {
  if (s.length > SHORT) return Buffer.byteLength(s, 'utf8');
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 0x7f) return Buffer.byteLength(s, 'utf8');
  return s.length;
}

/** Strings up to this long are measured and, when ASCII, copied by a loop. */
const SHORT = 64;

function headerValueSize(key: string, value: string): number {
  return (key === '' ? 0 : field(utf8(key))) + (value === '' ? 0 : field(utf8(value)));
}

function headerSize(key: string, value: string): number {
  return field(headerValueSize(key, value));
}

function optionSize(h: HeaderValueOption): number {
  const pre = preEncoded.get(h);
  if (pre) return pre.length;
  const hv = h.header;
  return hv ? headerSize(hv.key, hv.value) : 0;
}

function entrySize(key: string, value: string): number {
  return (key === '' ? 0 : field(utf8(key))) + field(field(utf8(value)));
}

function encodeLean(m: CheckResponse): Buffer {
  const ok = m.okResponse;
  let okSize = 0;
  if (ok) {
    for (const h of ok.headers) okSize += field(optionSize(h));
    for (const n of ok.headersToRemove) okSize += field(utf8(n));
  }
  const md = m.dynamicMetadata as Record<string, string | undefined> | undefined;
  let mdSize = 0;
  if (md) for (const k in md) if (md[k] !== undefined) mdSize += field(entrySize(k, md[k]));
  const total = (m.status ? 2 : 0) + (ok ? field(okSize) : 0) + (md ? field(mdSize) : 0);
  const out = Buffer.allocUnsafe(total);
  let at = 0;
  if (m.status) {
    out[at++] = 0x0a; // status = 1, an OK status has no fields
    out[at++] = 0;
  }
  if (ok) {
    at = tagLength(out, at, 0x1a, okSize); // ok_response = 3
    for (const h of ok.headers) {
      at = tagLength(out, at, 0x12, optionSize(h)); // headers = 2
      const pre = preEncoded.get(h);
      if (pre) at += pre.copy(out, at);
      else if (h.header) at = writeHeader(out, at, h.header.key, h.header.value);
    }
    for (const n of ok.headersToRemove) at = str(out, at, 0x2a, n); // headers_to_remove = 5
  }
  if (md) {
    at = tagLength(out, at, 0x22, mdSize); // dynamic_metadata = 4
    for (const k in md) {
      const v = md[k];
      if (v === undefined) continue;
      at = tagLength(out, at, 0x0a, entrySize(k, v)); // Struct.fields = 1, one map entry
      if (k !== '') at = str(out, at, 0x0a, k); // entry key = 1
      at = tagLength(out, at, 0x12, field(utf8(v))); // entry value = 2
      at = str(out, at, 0x1a, v); // Value.string_value = 3
    }
  }
  if (at !== total) throw new RangeError('CheckResponse size mismatch');
  return out;
}

/** HeaderValueOption { header = 1: HeaderValue { key = 1, value = 2 } }. */
function writeHeader(out: Buffer, at: number, key: string, value: string): number {
  at = tagLength(out, at, 0x0a, headerValueSize(key, value));
  if (key !== '') at = str(out, at, 0x0a, key);
  if (value !== '') at = str(out, at, 0x12, value);
  return at;
}

function str(out: Buffer, at: number, tag: number, s: string): number {
  const n = utf8(s);
  at = tagLength(out, at, tag, n);
  if (n !== s.length || n > SHORT) return at + out.write(s, at, 'utf8');
  for (let i = 0; i < n; i++) out[at + i] = s.charCodeAt(i);
  return at + n;
}

function tagLength(out: Buffer, at: number, tag: number, length: number): number {
  out[at++] = tag;
  while (length > 0x7f) {
    out[at++] = (length & 0x7f) | 0x80;
    length >>>= 7;
  }
  out[at++] = length;
  return at;
}
