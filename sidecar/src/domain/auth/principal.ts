/** Who the gateway resolved a request to. Opaque ids only. */
export type AuthMethod = 'api_key' | 'api_key_bearer' | 'session';

export interface Principal {
  readonly subjectId: string; // key id for keys, user id for sessions
  readonly tenantId: string;
  readonly method: AuthMethod;
  readonly scopes: readonly string[];
  readonly keyId: string | null;
}
