import type { Admission } from './request-context.js';
import type { GateDecision } from './exchange.js';

type Admitted = Extract<Admission, { ok: true }>;

/**
 * Hands a body's admission from ext_authz (which validated and priced it) to
 * ext_proc (which sends it upstream) when both run in this process, so the
 * body is parsed and rebuilt once. The entry is taken once, only for a body
 * of the same size; anything missing (another instance ran ext_authz, or the
 * entry expired) is simply admitted again. The gate's decision (principal and
 * hold) travels with it, so ext_proc need not decode the copy Envoy forwards.
 * Entries are keyed by Envoy's request id, which Envoy generates for every
 * request (a UUID; preserve_external_request_id off): a client cannot pick
 * another request's.
 */
export class AdmissionCache {
  private readonly entries = new Map<string, { bytes: number; admission: Admitted; decision: GateDecision; until: number }>();

  constructor(
    private readonly ttlMs = 30_000,
    private readonly maxEntries = 10_000,
    private readonly now: () => number = Date.now,
  ) {}

  put(requestId: string, body: Buffer, admission: Admitted, decision: GateDecision): void {
    if (!requestId) return;
    this.dropExpired();
    if (this.entries.size >= this.maxEntries) return; // full of live entries: the slow path still works
    this.entries.set(requestId, { bytes: body.length, admission, decision, until: this.now() + this.ttlMs });
  }

  /** What the gate decided for this request, while its entry is live (the entry stays for take()). */
  decisionOf(requestId: string): GateDecision | undefined {
    const e = this.entries.get(requestId);
    return e && e.until > this.now() ? e.decision : undefined;
  }

  /** Entries held now (for metrics and tests). */
  get size(): number {
    return this.entries.size;
  }

  take(requestId: string, body: Buffer): Admitted | undefined {
    const e = this.entries.get(requestId);
    if (!e) return undefined;
    this.entries.delete(requestId);
    return e.bytes === body.length && e.until > this.now() ? e.admission : undefined;
  }

  /**
   * Entries never taken (the client left, or ext_proc ran on another instance)
   * go as soon as they expire, not when the map is full: each can hold a body
   * of up to limits.maxRequestBytes. One TTL for all, so the map's insertion
   * order is expiry order and only its expired head is visited.
   */
  private dropExpired(): void {
    const now = this.now();
    for (const [id, e] of this.entries) {
      if (e.until > now) return;
      this.entries.delete(id);
    }
  }
}
