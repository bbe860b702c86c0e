/**
 * The few protobuf writes the lean answer encoders (check-response-encode.ts,
 * processing-response-encode.ts) need: each encoder sums its message's size
 * first, takes one buffer of exactly that size and writes into it at an
 * offset. Every write returns the offset after what it wrote. Field tags here
 * are one byte (field numbers up to 15).
 */

export const varintSize = (n: number): number => (n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : n < 0x10000000 ? 4 : 5);

/** A length-delimited field of `n` bytes: its one-byte tag, its length, its bytes. */
export const field = (n: number): number => 1 + varintSize(n) + n;

/** Strings up to this long are measured and, when ASCII, copied by a loop (a call into Buffer costs more). */
const SHORT = 64;

/** A string's UTF-8 length. */
export function utf8(s: string): number {
  if (s.length > SHORT) return Buffer.byteLength(s, 'utf8');
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 0x7f) return Buffer.byteLength(s, 'utf8');
  return s.length;
}

/** A tag and a varint (a length, or an unsigned value below 2^32). */
export function tagLength(out: Buffer, at: number, tag: number, length: number): number {
  out[at++] = tag;
  while (length > 0x7f) {
    out[at++] = (length & 0x7f) | 0x80;
    length >>>= 7;
  }
  out[at++] = length;
  return at;
}

/** A string field (`n`: its UTF-8 length, when known). */
export function str(out: Buffer, at: number, tag: number, s: string, n = utf8(s)): number {
  at = tagLength(out, at, tag, n);
  if (n !== s.length || n > SHORT) return at + out.write(s, at, 'utf8');
  for (let i = 0; i < n; i++) out[at + i] = s.charCodeAt(i);
  return at + n;
}

/** A bytes field. */
export function bytes(out: Buffer, at: number, tag: number, b: Uint8Array): number {
  at = tagLength(out, at, tag, b.length);
  out.set(b, at);
  return at + b.length;
}

/**
 * google.protobuf.Struct from a plain object, as the generated Struct.wrap +
 * encode write it: fields in Object.entries order, undefined values left out,
 * strings, numbers (double), booleans, null and nested objects. The bytes
 * (without the Struct's own tag and length) are a view of a scratch buffer that
 * the next call overwrites: copy them into the message before encoding another
 * Struct. null: `o` holds what this writer leaves to the generated encoder (an
 * array, a function, nesting deeper than MAX_STRUCT_DEPTH).
 *
 * Written in one pass into a scratch buffer: each nested length is given one
 * byte up front and, in the rare case its content reaches 128 bytes, the
 * content is moved up to make room for the longer varint. The objects come in
 * many shapes (the principal with or without a lease, the access log's fields),
 * so each key and value is read once, by the loop itself, and nothing is
 * measured twice.
 */
export function structBytes(o: object): Buffer | null {
  scratchAt = 0;
  if (!writeFields(o as Record<string, unknown>, 0)) return null;
  const bytes = scratch.subarray(0, scratchAt);
  // A buffer grown for an unusually large Struct is not kept (the view still holds it).
  if (scratch.length > SCRATCH_KEPT_BYTES) scratch = Buffer.allocUnsafe(SCRATCH_BYTES);
  return bytes;
}

/** Nested objects deeper than this are left to the generated encoder. */
const MAX_STRUCT_DEPTH = 32;

/** The scratch buffer's size, and the largest one kept between calls. */
const SCRATCH_BYTES = 4096;
const SCRATCH_KEPT_BYTES = 64 * 1024;
let scratch = Buffer.allocUnsafe(SCRATCH_BYTES);
let scratchAt = 0;

/** Room for `n` more bytes in the scratch buffer. */
function reserve(n: number): void {
  if (scratchAt + n <= scratch.length) return;
  const bigger = Buffer.allocUnsafe(Math.max(scratch.length * 2, scratchAt + n));
  scratch.copy(bigger, 0, 0, scratchAt);
  scratch = bigger;
}

/** A tag and one byte for the length of what follows; `close` writes the length. */
function open(tag: number): number {
  reserve(2);
  scratch[scratchAt++] = tag;
  return scratchAt++;
}

function close(lengthAt: number): void {
  const length = scratchAt - lengthAt - 1;
  if (length < 0x80) {
    scratch[lengthAt] = length;
    return;
  }
  const extra = varintSize(length) - 1;
  reserve(extra);
  scratch.copy(scratch, lengthAt + 1 + extra, lengthAt + 1, scratchAt);
  scratchAt += extra;
  tagLength(scratch, lengthAt - 1, scratch[lengthAt - 1] as number, length);
}

/** A string field: its tag, length and UTF-8 bytes. */
function stringField(tag: number, s: string): void {
  reserve(s.length * 3 + 6);
  const lengthAt = open(tag);
  if (s.length < 0x80) {
    let i = 0;
    for (; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c > 0x7f) break;
      scratch[scratchAt + i] = c;
    }
    if (i === s.length) {
      scratch[lengthAt] = i;
      scratchAt += i;
      return;
    }
  }
  scratchAt += scratch.write(s, scratchAt, 'utf8');
  close(lengthAt);
}

/** Each field of `o` as a map entry { key = 1, value = 2 }; false for a value a Struct cannot hold. */
function writeFields(o: Record<string, unknown>, depth: number): boolean {
  for (const k in o) {
    const v = o[k];
    if (v === undefined) continue;
    const entryAt = open(0x0a); // fields = 1
    if (k !== '') stringField(0x0a, k); // key = 1
    const valueAt = open(0x12); // value = 2
    if (typeof v === 'string') stringField(0x1a, v); // string_value = 3
    else if (typeof v === 'number') {
      reserve(9);
      scratch[scratchAt++] = 0x11; // number_value = 2
      scratchAt = scratch.writeDoubleLE(v, scratchAt);
    } else if (typeof v === 'boolean' || v === null) {
      reserve(2);
      scratch[scratchAt++] = v === null ? 0x08 : 0x20; // null_value = 1 / bool_value = 4
      scratch[scratchAt++] = v === true ? 1 : 0;
    } else if (typeof v === 'object' && !Array.isArray(v) && depth < MAX_STRUCT_DEPTH) {
      const structAt = open(0x2a); // struct_value = 5
      if (!writeFields(v as Record<string, unknown>, depth + 1)) return false;
      close(structAt);
    } else return false;
    close(valueAt);
    close(entryAt);
  }
  return true;
}

/** A HeaderValueOption that sets only its header (key, value, raw value): the only kind the gateway writes. */
export interface LeanHeader {
  readonly header?: { readonly key: string; readonly value: string; readonly rawValue: Uint8Array } | undefined;
  readonly append?: boolean | undefined;
  readonly appendAction: number;
  readonly keepEmptyValue: boolean;
}

export function leanHeader(h: LeanHeader): boolean {
  return h.header !== undefined && h.append === undefined && h.appendAction === 0 && !h.keepEmptyValue;
}

function headerValueSize(key: string, value: string, raw: Uint8Array): number {
  return (key === '' ? 0 : field(utf8(key))) + (value === '' ? 0 : field(utf8(value))) + (raw.length === 0 ? 0 : field(raw.length));
}

/** The option's bytes (without its own tag and length). */
export function headerOptionSize(h: LeanHeader): number {
  const v = h.header!;
  return field(headerValueSize(v.key, v.value, v.rawValue));
}

/** HeaderValueOption { header = 1: HeaderValue { key = 1, value = 2, raw_value = 3 } }. */
export function writeHeaderOption(out: Buffer, at: number, h: LeanHeader): number {
  const { key, value, rawValue } = h.header!;
  at = tagLength(out, at, 0x0a, headerValueSize(key, value, rawValue));
  if (key !== '') at = str(out, at, 0x0a, key);
  if (value !== '') at = str(out, at, 0x12, value);
  if (rawValue.length !== 0) at = bytes(out, at, 0x1a, rawValue);
  return at;
}
