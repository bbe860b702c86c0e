import type { FastifyRequest } from 'fastify';
import { isRole, type AccountStore, type Role } from '../src/store/account-contract.js';
import { AccountError, AccountErrors } from './http-errors.js';

/**
 * Who is calling, as the gateway's ext_authz established it (the identity
 * headers Envoy sets after removing any client copies), completed with the
 * account records: the person behind the call and their role in the workspace.
 *
 * Roles come from the account records, not from the session: the identity
 * provider's claim only brings a person into a workspace the first time they
 * use it (recorded with the claimed role); after that the records decide, so
 * a role change or a removal takes effect at once, even for a session that
 * still names the workspace. A key acts as the person who issued it; a key
 * the operator issued without a person has no role (owner_required on writes).
 */
export interface Caller {
  readonly workspaceId: string;
  readonly method: 'api_key' | 'api_key_bearer' | 'session';
  /** The person: the session's subject, or the person a key belongs to (null: an operator key). */
  readonly personId: string | null;
  readonly keyId: string | null;
  readonly scopes: readonly string[];
  readonly role: Role | null;
}

export function identityHeaders(req: FastifyRequest, brand: string) {
  const h = (name: string) => {
    const v = req.headers[`x-${brand}-${name}`];
    return typeof v === 'string' && v ? v : null;
  };
  return { tenant: h('tenant-id'), subject: h('subject-id'), method: h('auth-method'), scopes: h('scopes'), keyId: h('key-id'), role: h('role') };
}

export async function resolveCaller(req: FastifyRequest, brand: string, accounts: AccountStore, now: () => string): Promise<Caller> {
  const id = identityHeaders(req, brand);
  // Envoy only forwards authenticated requests; without identity this did not come through the gateway.
  if (!id.tenant || !id.subject || !id.method) throw new AccountError(AccountErrors.noWorkspace);
  const method = id.method === 'session' || id.method === 'api_key' || id.method === 'api_key_bearer' ? id.method : null;
  if (!method) throw new AccountError(AccountErrors.noWorkspace);
  const scopes = id.scopes ? id.scopes.split(' ') : [];
  if (method === 'session') {
    const personId = id.subject;
    let member = await accounts.getMember(id.tenant, personId);
    if (member === 'removed') throw new AccountError(AccountErrors.noWorkspace);
    if (member === null) {
      const claimed: Role = isRole(id.role) ? id.role : 'member';
      await accounts.addMember(id.tenant, { personId, role: claimed, addedAt: now() });
      member = await accounts.getMember(id.tenant, personId);
      if (member === null || member === 'removed') throw new AccountError(AccountErrors.noWorkspace);
    }
    return { workspaceId: id.tenant, method, personId, keyId: null, scopes, role: member.role };
  }
  const keyId = id.keyId ?? id.subject;
  const personId = await accounts.getKeyPerson(keyId);
  const member = personId ? await accounts.getMember(id.tenant, personId) : null;
  const role = member && member !== 'removed' ? member.role : null;
  return { workspaceId: id.tenant, method, personId, keyId, scopes, role };
}

export function requireSession(c: Caller): void {
  if (c.method !== 'session') throw new AccountError(AccountErrors.sessionRequired);
}

export function requireOwnerOrAdmin(c: Caller): void {
  if (c.role !== 'owner' && c.role !== 'admin') throw new AccountError(AccountErrors.ownerRequired);
}
