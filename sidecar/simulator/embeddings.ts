/**
 * POST /v1/embeddings: deterministic unit-norm vectors seeded by a hash of
 * each input, cached with their serialized forms (JSON floats and base64
 * float32 little-endian) so repeated inputs cost a map lookup.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { DirectiveScanner, type Directives } from './directives.js';
import { invalidRequest, type OpenAIError } from './errors.js';
import { estimateTokens } from './text.js';

export interface EmbeddingsRequest {
  readonly model: string;
  /** Strings, or token arrays (keyed by their joined ids). */
  readonly inputs: ReadonlyArray<string | readonly number[]>;
  readonly base64: boolean;
  readonly dims: number | null;
}

const CACHE_LIMIT = 512;

function isTokenArray(v: unknown): v is number[] {
  return Array.isArray(v) && v.length > 0 && v.every((x) => typeof x === 'number');
}

export function parseEmbeddings(body: unknown): EmbeddingsRequest | { error: OpenAIError } {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return { error: invalidRequest('The request body must be a JSON object.') };
  }
  const b = body as Record<string, unknown>;
  if (typeof b.model !== 'string' || b.model === '') {
    return { error: invalidRequest('You must provide a model parameter.', 'model', 'missing_required_parameter') };
  }
  const input = b.input;
  let inputs: Array<string | readonly number[]>;
  if (typeof input === 'string') inputs = [input];
  else if (isTokenArray(input)) inputs = [input];
  else if (Array.isArray(input)) inputs = input as Array<string | number[]>;
  else return { error: invalidRequest("Missing required parameter: 'input'.", 'input', 'missing_required_parameter') };
  if (inputs.length === 0) return { error: invalidRequest("'input' must not be empty.", 'input', 'invalid_value') };
  for (let i = 0; i < inputs.length; i++) {
    const x = inputs[i];
    if (!(typeof x === 'string' && x !== '') && !isTokenArray(x)) {
      return { error: invalidRequest(`Invalid 'input[${i}]': expected a non-empty string or token array.`, 'input', 'invalid_value') };
    }
  }
  const format = b.encoding_format ?? 'float';
  if (format !== 'float' && format !== 'base64') {
    return { error: invalidRequest("Invalid 'encoding_format': expected 'float' or 'base64'.", 'encoding_format', 'invalid_value') };
  }
  const dims = b.dimensions;
  if (dims !== undefined && dims !== null && (typeof dims !== 'number' || !Number.isInteger(dims) || dims < 1 || dims > 65536)) {
    return { error: invalidRequest("Invalid 'dimensions': expected a positive integer.", 'dimensions', 'invalid_value') };
  }
  return { model: b.model, inputs, base64: format === 'base64', dims: typeof dims === 'number' ? dims : null };
}

/** Prompt token estimate and directives from the input strings. */
export function scanEmbeddings(req: EmbeddingsRequest, headers: IncomingHttpHeaders): { promptTokens: number; directives: Readonly<Directives> } {
  const scanner = new DirectiveScanner();
  let tokens = 0;
  for (const x of req.inputs) {
    if (typeof x === 'string') {
      tokens += estimateTokens(x.length);
      scanner.text(x);
    } else tokens += x.length;
  }
  scanner.header(headers['x-sim-directive']);
  return { promptTokens: tokens, directives: scanner.result() };
}

/** FNV-1a over UTF-16 code units. */
function hash(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** mulberry32: tiny seeded PRNG, floats in [0, 1). */
function prng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The deterministic unit vector for a key. */
export function embed(key: string, dims: number): Float32Array {
  const next = prng(hash(key));
  const v = new Float64Array(dims);
  let norm = 0;
  for (let i = 0; i < dims; i++) {
    const x = next() * 2 - 1;
    v[i] = x;
    norm += x * x;
  }
  const scale = 1 / Math.sqrt(norm || 1);
  const out = new Float32Array(dims);
  for (let i = 0; i < dims; i++) out[i] = (v[i] ?? 0) * scale;
  return out;
}

interface Entry {
  readonly vector: Float32Array;
  json?: string;
  base64?: string;
}

export class EmbeddingCache {
  private readonly entries = new Map<string, Entry>();

  constructor(private readonly defaultDims: number) {}

  private entry(input: string | readonly number[], dims: number): Entry {
    const key = `${dims}:${typeof input === 'string' ? input : `tokens:${input.join(',')}`}`;
    let e = this.entries.get(key);
    if (e === undefined) {
      e = { vector: embed(key.slice(key.indexOf(':') + 1), dims) };
      if (this.entries.size >= CACHE_LIMIT) {
        const oldest = this.entries.keys().next();
        if (!oldest.done) this.entries.delete(oldest.value);
      }
      this.entries.set(key, e);
    }
    return e;
  }

  /** Serialized embedding: a JSON array of floats or a quoted base64 string. */
  serialized(input: string | readonly number[], dims: number, base64: boolean): string {
    const e = this.entry(input, dims);
    if (base64) {
      if (e.base64 === undefined) {
        const buf = Buffer.allocUnsafe(e.vector.length * 4);
        for (let i = 0; i < e.vector.length; i++) buf.writeFloatLE(e.vector[i] ?? 0, i * 4);
        e.base64 = `"${buf.toString('base64')}"`;
      }
      return e.base64;
    }
    if (e.json === undefined) {
      // 9 significant digits round-trip a float32 exactly
      e.json = `[${Array.from(e.vector, (x) => String(Number(x.toPrecision(9)))).join(',')}]`;
    }
    return e.json;
  }

  /** The whole response body. */
  render(req: EmbeddingsRequest, promptTokens: number): string {
    const dims = req.dims ?? this.defaultDims;
    let data = '';
    for (let i = 0; i < req.inputs.length; i++) {
      const input = req.inputs[i] ?? '';
      data += `${i ? ',' : ''}{"object":"embedding","index":${i},"embedding":${this.serialized(input, dims, req.base64)}}`;
    }
    return (
      `{"object":"list","data":[${data}],"model":${JSON.stringify(req.model)},` +
      `"usage":{"prompt_tokens":${promptTokens},"total_tokens":${promptTokens}}}`
    );
  }

  clear(): void {
    this.entries.clear();
  }
}
