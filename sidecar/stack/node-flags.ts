/**
 * V8 heap flags of every sidecar process: `npm start`, the tests and the bench
 * (stack.ts), the image (sidecar/Dockerfile), docker-compose.yml and the
 * Kubernetes Deployment (test/unit/sidecar-node-flags.test.ts keeps them equal).
 *
 * Without them V8 sizes the heap for the host, not for the sidecar: the young
 * generation grows to two 16 MiB semi-spaces during start-up, and with a heap
 * limit of several GiB the old generation may grow to about 4 times what
 * survived the last full GC before the next one. Under the bench's load
 * (Redis store, credit check on) the sidecar then held 190–230 MiB RSS with a
 * live heap of only 25–35 MiB; it is a plateau, not a leak (issue 11 target 6,
 * docs/benchmark.md "Sidecar memory").
 *
 * - `--max-old-space-size`: a limit below 2 GiB also lowers V8's heap growing
 *   factor (about 1.3 instead of up to 4), so full GCs come sooner; sized to
 *   fit the smallest container memory limit with room for the rest of the
 *   process (code, gRPC and Redis buffers: about 80 MiB).
 * - `--max-semi-space-size`: the young generation is allocated up front and
 *   counted in RSS whether used or not.
 */
export const SIDECAR_HEAP_LIMIT_MB = 384;
export const SIDECAR_SEMI_SPACE_MB = 8;

export const SIDECAR_NODE_FLAGS: readonly string[] = Object.freeze([
  `--max-semi-space-size=${String(SIDECAR_SEMI_SPACE_MB)}`,
  `--max-old-space-size=${String(SIDECAR_HEAP_LIMIT_MB)}`,
]);
