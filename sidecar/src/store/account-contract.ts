/**
 * The account service's own records, beside the key store and the ledger:
 * who belongs to which workspace with which role, which person a key belongs
 * to, the saved card and auto top-up settings of a workspace, the credit
 * tiers on offer, and top-up idempotency records. Money itself never lives
 * here: every balance change goes through the Ledger's atomic scripts.
 *
 * Two implementations (memory for the embedded default, Redis for
 * deployments) honour it; one contract test suite runs against both.
 */

export const ROLES = ['owner', 'admin', 'member'] as const;
export type Role = (typeof ROLES)[number];
export const isRole = (v: unknown): v is Role => typeof v === 'string' && (ROLES as readonly string[]).includes(v);

export interface Member {
  readonly personId: string;
  readonly role: Role;
  readonly addedAt: string; // ISO-8601 UTC
}

/** A card the payment provider tokenised; never the number. */
export interface SavedCard {
  readonly token: string;
  readonly brand: string;
  readonly last4: string;
  readonly savedAt: string;
}

export interface AutoTopup {
  readonly enabled: boolean;
  /** Fires when the available balance falls below this (micro-units). */
  readonly threshold: number;
  /** What each firing buys (micro-units). */
  readonly amount: number;
  readonly tierId: string | null;
  /** Why auto top-up was switched off by the service (a declined card), else null. */
  readonly disabledReason: string | null;
  readonly updatedAt: string;
}

export interface CreditTier {
  readonly id: string;
  /** Micro-units credited (and charged). */
  readonly amount: number;
  readonly label: string;
}

/** A finished top-up, kept for its Idempotency-Key (the first result is the answer to every resend). */
export interface IdempotencyRecord {
  /** SHA-256 of the request (method, path, body), to spot the same key with another body. */
  readonly fingerprint: string;
  readonly state: 'pending' | 'done';
  readonly status: number;
  readonly body: unknown;
  readonly createdAt: string;
}

export type MemberChange = 'ok' | 'not_found' | 'last_owner';

export interface AccountStore {
  /** 'removed': the person was removed from this workspace (a session still naming it is refused). */
  getMember(workspaceId: string, personId: string): Promise<Member | 'removed' | null>;
  listMembers(workspaceId: string): Promise<Member[]>;
  /** Adds or re-adds (after removal); false if the person is already a member. */
  addMember(workspaceId: string, member: Member): Promise<boolean>;
  /** Sets the role whatever was there (operator CLI, development identity provider). */
  putMember(workspaceId: string, member: Member): Promise<void>;
  /** Changes a role; refused when it would leave the workspace without an owner. Atomic. */
  setRole(workspaceId: string, personId: string, role: Role): Promise<MemberChange>;
  /** Removes a member (leaves a tombstone); refused for the last owner. Atomic. */
  removeMember(workspaceId: string, personId: string): Promise<MemberChange>;

  setKeyPerson(keyId: string, personId: string): Promise<void>;
  getKeyPerson(keyId: string): Promise<string | null>;

  getCard(workspaceId: string): Promise<SavedCard | null>;
  setCard(workspaceId: string, card: SavedCard | null): Promise<void>;
  getAutoTopup(workspaceId: string): Promise<AutoTopup | null>;
  setAutoTopup(workspaceId: string, settings: AutoTopup | null): Promise<void>;

  /** null: none set (the deployment's configured tiers apply). */
  getTiers(): Promise<CreditTier[] | null>;
  setTiers(tiers: CreditTier[] | null): Promise<void>;

  /** Claims an Idempotency-Key (a pending record); returns the existing record when taken. */
  claimIdempotency(workspaceId: string, key: string, record: IdempotencyRecord): Promise<IdempotencyRecord | null>;
  finishIdempotency(workspaceId: string, key: string, record: IdempotencyRecord): Promise<void>;
  /** Drops a pending claim (the attempt failed transiently and may be retried). */
  dropIdempotency(workspaceId: string, key: string): Promise<void>;

  /** Counts one event in the current fixed window (epoch minute) of a workspace's counter; returns the count so far. */
  countInWindow(workspaceId: string, counter: string, minute: number): Promise<number>;

  close(): Promise<void>;
}

/** True when changing `personId` to `role` (null: removal) leaves at least one owner. */
export function keepsAnOwner(members: readonly Member[], personId: string, role: Role | null): boolean {
  return members.some((m) => (m.personId === personId ? role === 'owner' : m.role === 'owner'));
}
