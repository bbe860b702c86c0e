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
 * strings, numbers (double), booleans, null and nested objects. Anything else
 * (an array) is not lean: `leanStruct` says so and the caller falls back.
 */
export type LeanValue = string | number | boolean | null | undefined | LeanObject;
export interface LeanObject {
  readonly [key: string]: LeanValue;
}

export function leanStruct(o: object): o is LeanObject {
  for (const k in o) {
    const v = (o as Record<string, unknown>)[k];
    if (v === null || v === undefined) continue;
    const t = typeof v;
    if (t === 'string' || t === 'number' || t === 'boolean') continue;
    if (t !== 'object' || Array.isArray(v) || !leanStruct(v as object)) return false;
  }
  return true;
}

/** The Struct's bytes (without its own tag and length). */
export function structSize(o: LeanObject): number {
  let n = 0;
  for (const k in o) {
    const v = o[k];
    if (v !== undefined) n += field(entrySize(k, v));
  }
  return n;
}

function entrySize(key: string, v: Exclude<LeanValue, undefined>): number {
  return (key === '' ? 0 : field(utf8(key))) + field(valueSize(v));
}

function valueSize(v: Exclude<LeanValue, undefined>): number {
  if (v === null || typeof v === 'boolean') return 2; // null_value = 1 / bool_value = 4: tag and one byte
  if (typeof v === 'number') return 9; // number_value = 2: tag and a double
  if (typeof v === 'string') return field(utf8(v)); // string_value = 3
  return field(structSize(v)); // struct_value = 5
}

export function writeStruct(out: Buffer, at: number, o: LeanObject): number {
  for (const k in o) {
    const v = o[k];
    if (v === undefined) continue;
    const nk = k === '' ? 0 : utf8(k);
    if (typeof v === 'string') {
      // The common case, each length counted once: { key = 1, value = 2: { string_value = 3 } }.
      const nv = utf8(v);
      at = tagLength(out, at, 0x0a, (nk === 0 ? 0 : field(nk)) + field(field(nv)));
      if (nk !== 0) at = str(out, at, 0x0a, k, nk);
      at = str(out, tagLength(out, at, 0x12, field(nv)), 0x1a, v, nv);
      continue;
    }
    at = tagLength(out, at, 0x0a, entrySize(k, v)); // fields = 1: one map entry
    if (k !== '') at = str(out, at, 0x0a, k, nk); // key = 1
    at = tagLength(out, at, 0x12, valueSize(v)); // value = 2
    if (v === null) {
      out[at++] = 0x08;
      out[at++] = 0;
    } else if (typeof v === 'boolean') {
      out[at++] = 0x20;
      out[at++] = v ? 1 : 0;
    } else if (typeof v === 'number') {
      out[at++] = 0x11;
      at = out.writeDoubleLE(v, at);
    } else at = writeStruct(out, tagLength(out, at, 0x2a, structSize(v)), v);
  }
  return at;
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
