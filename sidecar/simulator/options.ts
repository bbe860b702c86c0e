import type { SliceRequest } from './slices.js';

/**
 * Simulator options (fixed at start) and runtime config (changeable through
 * POST /_sim/config while running).
 */

export interface SimulatorOptions {
  /** Model ids listed by GET /v1/models. Other ids are accepted too. */
  readonly models?: readonly string[];
  /** Models that answer with `reasoning_content` before the visible text. */
  readonly reasoningModels?: readonly string[];
  /** Embedding dimensions (default 3584). */
  readonly dims?: number;
  /** Delay before response headers, every /v1 request (default 0). */
  readonly latencyMs?: number;
  /** Delay between streamed chunks (default 0). */
  readonly chunkDelayMs?: number;
  /** When set, /v1 requests need `Authorization: Bearer <apiKey>`. */
  readonly apiKey?: string | null;
  /** Visible completion tokens when no directive says otherwise (default 16). */
  readonly completionTokens?: number;
  /** Reasoning tokens for reasoning models (default 24). */
  readonly reasoningTokens?: number;
  /** Per-request logging through Fastify's pino logger (default off). */
  readonly logger?: boolean;
  /** Serve HTTPS with this certificate (PEM); optionally require client certificates from `clientCa`. */
  readonly tls?: SimulatorTls | null;
  /**
   * Write every stream in uneven slices (as the `#sim:sliced` directive does for one request):
   * `{ sliced: true, sliceSeed?, sliceMaxBytes? (500), sliceGapMs? (1) }`. Default: one write per event.
   */
  readonly slices?: SliceRequest | null;
}

export interface SimulatorTls {
  readonly cert: string | Buffer;
  readonly key: string | Buffer;
  /** When set, a client certificate issued by this CA (PEM) is required (mutual TLS). */
  readonly clientCa?: string | Buffer | null;
  /** Newest TLS version offered (default: Node's, TLS 1.3); to play an older server. */
  readonly maxVersion?: 'TLSv1.2' | 'TLSv1.3';
}

export interface ResolvedOptions {
  readonly models: readonly string[];
  readonly reasoningModels: ReadonlySet<string>;
  readonly dims: number;
  readonly apiKey: string | null;
  readonly completionTokens: number;
  readonly reasoningTokens: number;
  readonly logger: boolean;
  readonly slices: SliceRequest | null;
}

/** Mutable at runtime through POST /_sim/config. */
export interface RuntimeConfig {
  latencyMs: number;
  chunkDelayMs: number;
  /** When set, every /v1 request is answered with this error status. */
  forceStatus: number | null;
}

export const DEFAULT_MODELS = ['sim-quick-1', 'sim-core-1', 'sim-deep-r1', 'sim-embed-1'] as const;
export const DEFAULT_REASONING_MODELS = ['sim-deep-r1'] as const;

function count(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < 0) throw new Error(`simulator: ${name} must be a non-negative integer`);
  return value;
}

function resolveSlices(s: SliceRequest | null | undefined): SliceRequest | null {
  if (!s?.sliced) return null;
  if (s.sliceMaxBytes !== undefined && (!Number.isInteger(s.sliceMaxBytes) || s.sliceMaxBytes < 1)) throw new Error('simulator: sliceMaxBytes must be an integer >= 1');
  return Object.freeze({
    sliced: true,
    sliceSeed: s.sliceSeed === undefined ? undefined : count(s.sliceSeed, 0, 'sliceSeed'),
    sliceMaxBytes: s.sliceMaxBytes,
    sliceGapMs: s.sliceGapMs === undefined ? undefined : count(s.sliceGapMs, 0, 'sliceGapMs'),
  });
}

export function resolveOptions(opts: SimulatorOptions): ResolvedOptions {
  const dims = count(opts.dims, 3584, 'dims');
  if (dims < 1) throw new Error('simulator: dims must be at least 1');
  return {
    models: [...(opts.models ?? DEFAULT_MODELS)],
    reasoningModels: new Set(opts.reasoningModels ?? DEFAULT_REASONING_MODELS),
    dims,
    apiKey: opts.apiKey ? opts.apiKey : null,
    completionTokens: count(opts.completionTokens, 16, 'completionTokens'),
    reasoningTokens: count(opts.reasoningTokens, 24, 'reasoningTokens'),
    logger: opts.logger ?? false,
    slices: resolveSlices(opts.slices),
  };
}

export function initialConfig(opts: SimulatorOptions): RuntimeConfig {
  return {
    latencyMs: count(opts.latencyMs, 0, 'latencyMs'),
    chunkDelayMs: count(opts.chunkDelayMs, 0, 'chunkDelayMs'),
    forceStatus: null,
  };
}

/** Applies a POST /_sim/config body; returns an error message or null. */
export function updateConfig(config: RuntimeConfig, body: unknown): string | null {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return 'body must be a JSON object';
  const patch = body as Record<string, unknown>;
  const next = { ...config };
  for (const key of ['latencyMs', 'chunkDelayMs'] as const) {
    const v = patch[key];
    if (v === undefined) continue;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) return `${key} must be a non-negative integer`;
    next[key] = v;
  }
  const fs = patch.forceStatus;
  if (fs !== undefined) {
    if (fs !== null && (typeof fs !== 'number' || !Number.isInteger(fs) || fs < 400 || fs > 599)) {
      return 'forceStatus must be an integer 400-599 or null';
    }
    next.forceStatus = fs;
  }
  Object.assign(config, next);
  return null;
}
