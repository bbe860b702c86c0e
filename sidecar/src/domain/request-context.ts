import type { ResolvedAlias } from './catalog.js';

/** What the gateway remembers about an admitted inference request. */
export interface FloorReport {
  readonly requested: number | null;
  readonly effective: number;
}

export interface InferenceContext {
  readonly endpoint: 'chat' | 'embeddings';
  readonly resolved: ResolvedAlias;
  readonly stream: boolean;
  /** Set when the svc-deep floor raised max_tokens. */
  readonly floor: FloorReport | null;
  /** Embeddings: number of input strings. */
  readonly requestCount: number;
  /** Effective output cap sent upstream (null: provider default). */
  readonly maxTokens: number | null;
  /** Prompt tokens counted by the gateway (about 4 characters a token), for estimates. */
  readonly promptEstimate: number;
  /** UTF-8 size of the prompt material sent (messages and tools, or inputs): bounds prompt tokens. */
  readonly promptBytes: number;
  /** Messages (chat) or input strings (embeddings). */
  readonly messageCount: number;
}

export type Admission =
  | { readonly ok: true; /** What goes to the provider (UTF-8 JSON). */ readonly upstreamBody: Buffer; readonly ctx: InferenceContext }
  | { readonly ok: false; readonly error: import('./errors.js').GatewayError };
