import { BinaryReader, WireType } from '@bufbuild/protobuf/wire';

/**
 * google.protobuf.Struct straight to the plain object the generated code makes
 * (`Struct.unwrap(Struct.decode(...))`), without its intermediate entry and
 * Value objects: the ext_authz metadata and the attributes Envoy sends with
 * the first ext_proc message of every exchange were the largest decoding cost
 * of a JSON chat (benchmark.md, 2026-11-27 late). Same results as the
 * generated decoder for anything a protobuf encoder writes: a map entry
 * without a value (or with a Value of no kind) is left out, a repeated key
 * keeps its last value, a Value's last kind wins, and a `__proto__` key is
 * dropped.
 */

const MAX_DEPTH = 100;

type Plain = string | number | boolean | null | Plain[] | { [key: string]: Plain };

/** Decodes the Struct of `length` bytes at the reader's position. */
export function decodeStructPlain(reader: BinaryReader, length: number, depth = 0): Record<string, Plain> {
  if (depth >= MAX_DEPTH) throw new Error('protobuf decode recursion limit exceeded');
  const out: Record<string, Plain> = {};
  const end = reader.pos + length;
  while (reader.pos < end) {
    const tag = reader.uint32();
    if (tag !== 10) {
      // Struct has only field 1 (fields, a map): anything else is skipped, as the generated decoder does.
      if ((tag & 7) === WireType.EndGroup || tag === 0) break;
      reader.skip(tag & 7);
      continue;
    }
    const entryEnd = reader.uint32() + reader.pos;
    let key = '';
    let value: Plain | undefined;
    while (reader.pos < entryEnd) {
      const t = reader.uint32();
      if (t === 10) key = reader.string();
      else if (t === 18) value = decodeValue(reader, reader.uint32(), depth + 1);
      else {
        if ((t & 7) === WireType.EndGroup || t === 0) break;
        reader.skip(t & 7);
      }
    }
    // '__proto__' never reaches the generated decoder's result either (its assignment sets the prototype).
    if (value === undefined || key === '__proto__') continue;
    out[key] = value;
  }
  return out;
}

function decodeValue(reader: BinaryReader, length: number, depth: number): Plain | undefined {
  if (depth >= MAX_DEPTH) throw new Error('protobuf decode recursion limit exceeded');
  const end = reader.pos + length;
  let value: Plain | undefined;
  while (reader.pos < end) {
    const tag = reader.uint32();
    switch (tag) {
      case 8: // null_value
        reader.int32();
        value = null;
        break;
      case 17: // number_value
        value = reader.double();
        break;
      case 26: // string_value
        value = reader.string();
        break;
      case 32: // bool_value
        value = reader.bool();
        break;
      case 42: // struct_value
        value = decodeStructPlain(reader, reader.uint32(), depth + 1);
        break;
      case 50: // list_value
        value = decodeList(reader, reader.uint32(), depth + 1);
        break;
      default:
        if ((tag & 7) === WireType.EndGroup || tag === 0) return value;
        reader.skip(tag & 7);
    }
  }
  return value;
}

function decodeList(reader: BinaryReader, length: number, depth: number): Plain[] {
  if (depth >= MAX_DEPTH) throw new Error('protobuf decode recursion limit exceeded');
  const end = reader.pos + length;
  const out: Plain[] = [];
  while (reader.pos < end) {
    const tag = reader.uint32();
    if (tag === 10) {
      const v = decodeValue(reader, reader.uint32(), depth + 1);
      // The generated ListValue keeps a Value of no kind as undefined.
      out.push(v as Plain);
      continue;
    }
    if ((tag & 7) === WireType.EndGroup || tag === 0) break;
    reader.skip(tag & 7);
  }
  return out;
}

/** A map<string, Struct> entry (key = 1, value = 2) at the reader's position; `length` bytes. */
export function decodeStructEntry(reader: BinaryReader, length: number): { key: string; value: Record<string, Plain> | undefined } {
  const end = reader.pos + length;
  let key = '';
  let value: Record<string, Plain> | undefined;
  while (reader.pos < end) {
    const tag = reader.uint32();
    if (tag === 10) key = reader.string();
    else if (tag === 18) value = decodeStructPlain(reader, reader.uint32(), 1);
    else {
      if ((tag & 7) === WireType.EndGroup || tag === 0) break;
      reader.skip(tag & 7);
    }
  }
  return { key, value };
}
