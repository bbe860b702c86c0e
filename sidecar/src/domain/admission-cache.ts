import type { Admission } from './request-context.js';

type Admitted = Extract<Admission, { ok: true }>;

/**
 * Hands a body's admission from ext_authz (which validated and priced it) to
 * ext_proc (which sends it upstream) when both run in this process, so the
 * body is parsed and rebuilt once. The entry is taken once, only for a body
 * of the same size; anything missing (another instance ran ext_authz, or the
 * entry expired) is simply admitted again.
 */
export class AdmissionCache {
  private readonly entries = new Map<string, { bytes: number; admission: Admitted; until: number }>();

  constructor(
    private readonly ttlMs = 30_000,
    private readonly maxEntries = 10_000,
    private readonly now: () => number = Date.now,
  ) {}

  put(requestId: string, body: Buffer, admission: Admitted): void {
    if (!requestId) return;
    if (this.entries.size >= this.maxEntries) this.sweep();
    if (this.entries.size >= this.maxEntries) return; // full of live entries: the slow path still works
    this.entries.set(requestId, { bytes: body.length, admission, until: this.now() + this.ttlMs });
  }

  take(requestId: string, body: Buffer): Admitted | undefined {
    const e = this.entries.get(requestId);
    if (!e) return undefined;
    this.entries.delete(requestId);
    return e.bytes === body.length && e.until > this.now() ? e.admission : undefined;
  }

  private sweep(): void {
    const now = this.now();
    for (const [id, e] of this.entries) if (e.until <= now) this.entries.delete(id);
  }
}
