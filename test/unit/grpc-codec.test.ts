/** The reused-writer serializer: the same bytes as the generated one, message after message, whatever came before. */
import { describe, expect, it } from 'vitest';
import { reusedWriterSerializer } from '../../sidecar/src/adapters/grpc-codec.js';
import { ProcessingResponse } from '../../sidecar/src/generated/envoy/service/ext_proc/v3/external_processor.js';

const generated = (m: ProcessingResponse) => Buffer.from(ProcessingResponse.encode(m).finish());
const serialize = reusedWriterSerializer(ProcessingResponse.encode);

const withBody = (n: number, meta = true): ProcessingResponse =>
  ({
    requestDrain: false,
    responseBody: { response: { status: 0, clearRouteCache: false, bodyMutation: { body: Buffer.alloc(n, 97) } } },
    ...(meta ? { dynamicMetadata: { gateway: { outcome: 'ok', prompt_tokens: n } } } : {}),
  }) as ProcessingResponse;

describe('reusedWriterSerializer', () => {
  it('writes what the generated serializer writes, for small, large and repeated messages in any order', () => {
    const sizes = [0, 5, 700, 300_000, 3, 70_000, 1, 2_000];
    const outs = sizes.map((n, i) => serialize(withBody(n, i % 2 === 0)));
    sizes.forEach((n, i) => expect(outs[i]!.equals(generated(withBody(n, i % 2 === 0)))).toBe(true));
    // Earlier results are not overwritten by later messages.
    expect(outs[1]!.equals(generated(withBody(5, false)))).toBe(true);
  });

  it('starts clean after a message that failed half-way', () => {
    const bad = { requestDrain: false, responseBody: { response: { status: 0, clearRouteCache: false, bodyMutation: { body: 42 } } } } as never;
    expect(() => serialize(bad)).toThrow();
    expect(serialize(withBody(10)).equals(generated(withBody(10)))).toBe(true);
  });
});
