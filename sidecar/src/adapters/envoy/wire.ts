import { BinaryReader, WireType } from '@bufbuild/protobuf/wire';

/**
 * A reader over a protobuf message with the few steps the lean decoders
 * (check-request-decode.ts, processing-request-decode.ts) need: the library's reader for
 * varints and skipping, strings and bytes as slices of the message's own
 * Buffer (no TextDecoder, no tag tuple per field).
 */
export class Wire {
  readonly r: BinaryReader;
  readonly b: Buffer;
  constructor(bytes: Uint8Array) {
    // grpc-js hands over Buffers; other bytes are viewed as one, not copied.
    this.b = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.r = new BinaryReader(this.b);
  }
  /** The next field's tag (field number << 3 | wire type). */
  tag(): number {
    return this.r.uint32();
  }
  /** The end of the length-delimited value at the reader (its length is read). */
  end(): number {
    const end = this.r.uint32() + this.r.pos;
    if (end > this.r.len) throw new RangeError('premature EOF');
    return end;
  }
  string(): string {
    const end = this.end();
    const s = this.b.toString('utf8', this.r.pos, end);
    this.r.pos = end;
    return s;
  }
  bytes(): Buffer {
    const end = this.end();
    const out = this.b.subarray(this.r.pos, end);
    this.r.pos = end;
    return out;
  }
  skip(tag: number): void {
    this.r.skip(tag & 7, tag >>> 3);
  }
  /** After a nested message's fields: they must end exactly at its end. */
  done(end: number): void {
    if (this.r.pos !== end) throw new RangeError('premature EOF');
  }
}

/** A length-delimited field's tag. */
export const ld = (fieldNo: number): number => (fieldNo << 3) | WireType.LengthDelimited;
