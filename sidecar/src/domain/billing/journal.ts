import { appendFileSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { SettleInput } from '../../store/ledger-contract.js';

/**
 * Settlements and releases the ledger could not take at the moment, kept on
 * local disk (one JSON line each, fsync'd by the OS on append) and retried
 * until applied. Replays are safe: settle and release are idempotent by
 * request id. Survives a sidecar restart: the file is read at start.
 */
export type PendingOp = { op: 'settle'; input: SettleInput } | { op: 'release'; tenantId: string; requestId: string };

export class SettlementJournal {
  constructor(private readonly path: string) {
    mkdirSync(dirname(path), { recursive: true });
  }

  append(op: PendingOp): void {
    appendFileSync(this.path, `${JSON.stringify(op)}\n`, { mode: 0o600 });
  }

  pending(): PendingOp[] {
    if (!existsSync(this.path)) return [];
    const out: PendingOp[] = [];
    for (const line of readFileSync(this.path, 'utf8').split('\n')) {
      if (!line.trim()) continue;
      try {
        out.push(JSON.parse(line) as PendingOp);
      } catch {
        // A torn last line from a crash mid-append: the operation before it is intact.
      }
    }
    return out;
  }

  /** Replaces the journal with what is still pending (atomic rename). */
  rewrite(remaining: readonly PendingOp[]): void {
    const tmp = `${this.path}.tmp`;
    writeFileSync(tmp, remaining.map((op) => `${JSON.stringify(op)}\n`).join(''), { mode: 0o600 });
    renameSync(tmp, this.path);
  }
}
