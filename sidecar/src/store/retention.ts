/**
 * How long the ledger keeps history, shared by both ledgers: usage records and
 * ledger entries are trimmed once older than their retention; a finished hold
 * (settled or released) is remembered for replays for FINISHED_HOLD_MS.
 */
import { DEFAULT_RETENTION_DAYS } from '../config/schema.js';

const DAY_MS = 86_400_000;

/** How long stream entries are kept, in milliseconds (tests use short ones). */
export interface StreamRetention {
  readonly usageRecordMs: number;
  readonly ledgerMs: number;
}

/** The config's retention (days) in milliseconds. */
export function retentionFromDays(r: { usageRecordDays: number; ledgerDays: number }): StreamRetention {
  return { usageRecordMs: r.usageRecordDays * DAY_MS, ledgerMs: r.ledgerDays * DAY_MS };
}

/** The defaults of the configuration (retention.usageRecordDays, retention.ledgerDays). */
export const DEFAULT_RETENTION: StreamRetention = Object.freeze(retentionFromDays(DEFAULT_RETENTION_DAYS));

/** A settled or released hold is kept this long after it finished (Redis: the hold key's expiry). */
export const FINISHED_HOLD_MS = 7 * DAY_MS;

export function checkRetention(retention: StreamRetention): StreamRetention {
  for (const ms of [retention.usageRecordMs, retention.ledgerMs]) {
    if (!Number.isSafeInteger(ms) || ms <= 0) throw new TypeError('retention must be a positive whole number of milliseconds');
  }
  return retention;
}
