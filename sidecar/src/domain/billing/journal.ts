import { appendFileSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { SettleInput } from '../../store/ledger-contract.js';
import { IntentLog, type IntentMark } from './intent-log.js';
import { decodeFacts, encodeFacts, settleInputOf, type SettlementFacts } from './settlement-record.js';

/**
 * Settlements and releases the ledger could not take at the moment, kept on
 * local disk (one JSON line each, handed to the kernel on append, so a crash
 * of the process keeps it) and retried until applied. Replays are safe:
 * settle and release are idempotent by request id. Survives a sidecar
 * restart: the file is read at start.
 */
export type PendingOp = { op: 'settle'; input: SettleInput } | { op: 'release'; tenantId: string; requestId: string };

export class SettlementJournal {
  /**
   * Settlements on their way to the ledger: written here before the answer they
   * bill leaves, marked done once the ledger has them (or this journal does).
   */
  private readonly intents: IntentLog;

  constructor(private readonly path: string) {
    mkdirSync(dirname(path), { recursive: true });
    this.intents = new IntentLog(`${path}.intents`);
  }

  /** Records a settlement about to be sent to the ledger; throws if it could not be written. */
  intend(facts: SettlementFacts): IntentMark {
    return this.intents.record(encodeFacts(facts));
  }

  /** The settlement recorded at `mark` reached the ledger, or this journal. */
  carriedOut(mark: IntentMark): void {
    this.intents.done(mark);
  }

  /** Settlements recorded and not yet carried out by this process. */
  get intended(): number {
    return this.intents.pending;
  }

  /**
   * A previous life's settlements that were recorded but never carried out (it
   * died between the answer and the ledger): appended to this journal, which
   * retries them (idempotent by request id). Returns how many, and how many
   * lines were not a whole record (a torn last write) or not a figure the
   * ledger could take. Call at start.
   */
  adoptIntents(): { adopted: number; unreadable: number } {
    const ops: PendingOp[] = [];
    let unreadable = 0;
    for (const line of this.intents.recover()) {
      const input = priced(decodeFacts(line));
      if (input) ops.push({ op: 'settle', input });
      else unreadable += 1;
    }
    if (ops.length) this.append(...ops);
    this.intents.forget();
    return { adopted: ops.length, unreadable };
  }

  /** Closes the intents' file (a stop, once every settlement is written or journaled). */
  close(): void {
    this.intents.close();
  }

  /** Appends operations in one write, one line each. */
  append(...ops: PendingOp[]): void {
    appendFileSync(this.path, lines(ops), { mode: 0o600 });
  }

  pending(): PendingOp[] {
    if (!existsSync(this.path)) return [];
    const out: PendingOp[] = [];
    for (const line of readFileSync(this.path, 'utf8').split('\n')) {
      try {
        out.push(JSON.parse(line) as PendingOp);
      } catch {
        // The empty line after the last newline, or a torn last line from a crash
        // mid-append (the operation before it is intact): nothing to retry.
      }
    }
    return out;
  }

  /** Replaces the journal with what is still pending (atomic rename). */
  rewrite(remaining: readonly PendingOp[]): void {
    const tmp = `${this.path}.tmp`;
    writeFileSync(tmp, lines(remaining), { mode: 0o600 });
    renameSync(tmp, this.path);
  }
}

/** The settlement of recorded facts; null for none, or a cost no ledger could take. */
function priced(facts: SettlementFacts | null): SettleInput | null {
  try {
    return facts && settleInputOf(facts);
  } catch {
    return null;
  }
}

/** The journal's format: one JSON line per operation. */
function lines(ops: readonly PendingOp[]): string {
  return ops.map((op) => `${JSON.stringify(op)}\n`).join('');
}
