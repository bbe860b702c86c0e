import { BinaryWriter } from '@bufbuild/protobuf/wire';

/** A message this large or larger leaves its grown buffer behind (not kept for the next one). */
const KEEP_BYTES = 256 * 1024;

let shared = new BinaryWriter();

/**
 * A gRPC serializer over one reused protobuf writer. The generated one starts a
 * new writer per message (a 128-byte buffer that doubles, copying, until the
 * message fits), copies the result out, and Buffer.from copies it once more;
 * this one keeps the grown buffer for the next message and hands grpc-js the
 * finished bytes without the last copy. Encoding is synchronous, so one writer
 * serves every call of this process.
 */
export function reusedWriterSerializer<T>(encode: (message: T, writer: BinaryWriter) => BinaryWriter): (message: T) => Buffer {
  return (message) => {
    let bytes: Uint8Array;
    try {
      bytes = encode(message, shared).finish();
    } catch (err) {
      shared = new BinaryWriter(); // left half-written
      throw err;
    }
    if (bytes.byteLength >= KEEP_BYTES) shared = new BinaryWriter();
    return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  };
}
