/** Who the gateway resolved a request to. Opaque ids only. */
export type AuthMethod = 'api_key' | 'api_key_bearer' | 'session';

export interface Principal {
  /** Key id for keys, user id for sessions. */
  readonly subjectId: string;
  readonly tenantId: string;
  readonly method: AuthMethod;
  /** A key's scopes; empty for sessions. */
  readonly scopes: readonly string[];
  readonly keyId: string | null;
  /** A session's role in the workspace (owner, admin, member); null for keys. */
  readonly role: string | null;
}
