import type { KeyRecord } from '../../store/contract.js';

/**
 * Found keys, kept for a short time so the hot path needs no store round trip
 * for the key lookup. A revocation drops the entry at once on every gateway
 * instance (the operator API publishes it); if that message is lost, the
 * entry still expires after `ttlMs`. Unknown keys are never cached: a miss
 * always asks the store. While the store is down, fresh entries keep
 * authenticating, so the money path (which needs the store) answers
 * 503 credits_unavailable rather than a misleading 401.
 */
export class KeyCache {
  private readonly entries = new Map<string, { record: KeyRecord; until: number }>();

  constructor(
    private readonly ttlMs: number,
    private readonly maxEntries = 100_000,
    private readonly now: () => number = Date.now,
  ) {}

  async get(hash: string, load: (hash: string) => Promise<KeyRecord | null>): Promise<KeyRecord | null> {
    const hit = this.entries.get(hash);
    if (hit && hit.until > this.now()) return hit.record;
    const record = await load(hash);
    if (record && record.status === 'active' && this.ttlMs > 0) {
      if (this.entries.size >= this.maxEntries) this.entries.clear();
      this.entries.set(hash, { record, until: this.now() + this.ttlMs });
    } else {
      this.entries.delete(hash);
    }
    return record;
  }

  invalidate(hash: string): void {
    this.entries.delete(hash);
  }

  /** Forgets every key (revocations may have been missed). */
  clear(): void {
    this.entries.clear();
  }
}
