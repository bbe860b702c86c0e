import { InsufficientBalanceError, LEASE_BLOCK_MS, type AdjustResult, type Ledger } from '../../store/ledger-contract.js';

/**
 * Money changes that must not wait for credit leases to run out. Requests admitted inside a
 * lease hold part of it without the store knowing which part, so only the instance holding
 * the lease can give it back (it first moves those requests into holds of their own). These
 * ask every instance to give the tenant's leases back (`recall`: a broadcast that reaches
 * this instance too) and wait a moment for it.
 */
export type Recall = (tenantId: string) => Promise<void>;

/** Broadcast topic: give back your credit leases of this tenant (its message is the tenant id). */
export const LEASE_RECALL_TOPIC = 'leases:recall';

/** How long these wait for the leases to come back (no lease is granted meanwhile after a refused deduct). */
const WAIT_MS = LEASE_BLOCK_MS / 2;
const POLL_MS = 20;

const pause = () => new Promise((r) => setTimeout(r, POLL_MS));

/** A recall that cannot be sent (the broadcast is down) is as good as one nobody answered: the waits below decide. */
const tryRecall = (recall: Recall, tenantId: string) => recall(tenantId).catch(() => undefined);

/**
 * A balance adjustment that, when only credit leases stand in the way of a deduct, recalls
 * the tenant's leases once and asks again until they are back, for at most WAIT_MS.
 * Refused for good: InsufficientBalanceError, as the ledger says. The idempotency key is
 * only used by the attempt that applies.
 */
export async function adjustRecallingLeases(ledger: Ledger, recall: Recall, tenantId: string, amount: number, idempotencyKey: string, reason: string, now: () => number): Promise<AdjustResult> {
  const until = now() + WAIT_MS;
  let recalled = false;
  for (;;) {
    try {
      return await ledger.adjustBalance(tenantId, amount, idempotencyKey, reason, now());
    } catch (err) {
      if (!(err instanceof InsufficientBalanceError) || !err.leased || now() >= until) throw err;
      if (!recalled) {
        recalled = true;
        await tryRecall(recall, tenantId);
      }
      await pause();
    }
  }
}

/**
 * Sets (or clears) the spend cap, then recalls the leases granted under the old one and
 * waits, for at most WAIT_MS, until none is left: requests admitted after this returns are
 * checked against the new cap. Returns the micro-units still in stale leases (0: none; more:
 * an instance did not answer, and its leases admit until their next settlement reports them
 * stale).
 */
export async function setCapRecallingLeases(ledger: Ledger, recall: Recall, tenantId: string, cap: number | null, now: () => number): Promise<number> {
  await ledger.setCap(tenantId, cap);
  let stale = await ledger.staleLeased(tenantId);
  if (stale === 0) return 0;
  await tryRecall(recall, tenantId);
  const until = now() + WAIT_MS;
  while (stale > 0 && now() < until) {
    await pause();
    stale = await ledger.staleLeased(tenantId);
  }
  return stale;
}
