/**
 * Streams per second at c connections: c sequential streaming clients (one
 * keep-alive connection each) side by side for a fixed time, each reading
 * every stream to its end and checking it (event count, `data: [DONE]`), so
 * a stream counts only when it was whole. Unlike autocannon, it also keeps
 * the time to the first complete event and to [DONE] under that load.
 */
import { StreamClient, emptyStreamSample, type RequestSpec, type StreamSample } from './latency.js';

export interface StreamLoad {
  readonly sample: StreamSample;
  readonly durationS: number;
}

export async function streamLoad(
  spec: RequestSpec,
  check: (status: number, body: string, events: number) => string | null,
  connections: number,
  seconds: number,
  into: StreamSample = emptyStreamSample(),
): Promise<StreamLoad> {
  const clients = Array.from({ length: connections }, () => new StreamClient(spec, check));
  const t0 = performance.now();
  const end = t0 + seconds * 1000;
  try {
    await Promise.all(
      clients.map(async (c) => {
        while (performance.now() < end) await c.run(1, into);
      }),
    );
  } finally {
    for (const c of clients) c.close();
  }
  return { sample: into, durationS: (performance.now() - t0) / 1000 };
}
