import type { Logger } from 'pino';
import type { Config } from '../src/config/schema.js';
import type { Store } from '../src/store/contract.js';
import type { Ledger } from '../src/store/ledger-contract.js';
import type { AccountStore } from '../src/store/account-contract.js';
import type { PaymentProvider } from './payments/provider.js';
import type { AutoTopupTrigger } from '../src/store/auto-topup-trigger.js';

/** Everything the account service works with; built once by whoever runs it (its own process, or the sidecar's). */
export interface AccountDeps {
  readonly cfg: Config;
  readonly store: Store;
  readonly ledger: Ledger;
  readonly accounts: AccountStore;
  /** null: no payment provider configured (top-ups answer topup_not_configured). */
  readonly payments: PaymentProvider | null;
  /** Arms and clears auto top-up thresholds (the firing itself runs in the sidecar after settlements). */
  readonly trigger: AutoTopupTrigger;
  /** A key was revoked here: drop it from every gateway instance's cache (the revocation pub/sub). */
  readonly onKeyRevoked: (hash: string) => Promise<void>;
  /**
   * Asks every gateway instance to give its credit leases of a workspace back (the lease
   * recall broadcast): a new spend cap applies to requests admitted after it is set.
   * Absent: nothing to recall (the leases see the new cap at their next settlement).
   */
  readonly recallLeases?: (workspaceId: string) => Promise<void>;
  readonly log: Logger;
  readonly now?: () => number;
}
