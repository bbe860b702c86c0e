import type { FastifyInstance, FastifyRequest } from 'fastify';
import { issueKey, OperatorError } from '../../src/domain/operator.js';
import { keyPrefix } from '../../src/domain/auth/keys.js';
import type { KeyRecord } from '../../src/store/contract.js';
import type { Member } from '../../src/store/account-contract.js';
import type { AccountDeps } from '../deps.js';
import { requireOwnerOrAdmin, requireSession, resolveCaller, type Caller } from '../caller.js';
import { AccountError, AccountErrors, parseWith } from '../http-errors.js';
import { AddMemberBody, ChangeRoleBody, CreateKeyBody } from '../schemas.js';

/**
 * /v1/accounts*: the caller, the workspace's members and roles, and keys
 * issued by signed-in people.
 *
 * Who may do what:
 * - anyone in the workspace (key or session) reads /accounts/me, the member list and the key list;
 * - member changes and key issuing/revoking take a session (a key gets session_required: a key never manages keys or people);
 * - owners and admins add members, change roles and remove members; only an owner grants, changes or removes the owner role;
 * - anyone may remove themselves; a workspace always keeps an owner (last_owner);
 * - any member issues keys (the key is theirs and acts as them); a member revokes their own keys, owners and admins any key.
 */
export function accountRoutes(app: FastifyInstance, deps: AccountDeps): void {
  const now = () => new Date((deps.now ?? Date.now)()).toISOString();
  const caller = (req: FastifyRequest) => resolveCaller(req, deps.cfg.brand, deps.accounts, now);
  const brand = deps.cfg.brand;

  app.get('/v1/accounts/me', async (req) => {
    const c = await caller(req);
    return {
      object: 'account',
      tenant_id: c.workspaceId,
      workspace_id: c.workspaceId,
      subject_id: c.method === 'session' ? c.personId : c.keyId,
      person_id: c.personId,
      auth_method: c.method,
      role: c.role,
      scopes: c.scopes,
      key_id: c.keyId,
    };
  });

  app.get('/v1/accounts/members', async (req) => {
    const c = await caller(req);
    const members = await deps.accounts.listMembers(c.workspaceId);
    return { object: 'list', data: members.map(memberView) };
  });

  app.post('/v1/accounts/members', async (req, reply) => {
    const c = await manager(req);
    const body = parseWith(AddMemberBody, 'body', req.body ?? {});
    if (body.role === 'owner' && c.role !== 'owner') throw new AccountError(AccountErrors.ownerOnly);
    const member: Member = { personId: body.person_id, role: body.role, addedAt: now() };
    if (!(await deps.accounts.addMember(c.workspaceId, member))) throw new AccountError(AccountErrors.memberExists);
    deps.log.info({ tenant_id: c.workspaceId, person_id: member.personId, role: member.role, by: c.personId }, 'member added');
    return reply.code(201).send(memberView(member));
  });

  app.patch<{ Params: { person_id: string } }>('/v1/accounts/members/:person_id', async (req) => {
    const c = await manager(req);
    const { role } = parseWith(ChangeRoleBody, 'body', req.body ?? {});
    const target = await existingMember(c, req.params.person_id);
    if ((role === 'owner' || target.role === 'owner') && c.role !== 'owner') throw new AccountError(AccountErrors.ownerOnly);
    outcome(await deps.accounts.setRole(c.workspaceId, target.personId, role));
    deps.log.info({ tenant_id: c.workspaceId, person_id: target.personId, role, by: c.personId }, 'member role changed');
    return memberView({ ...target, role });
  });

  app.delete<{ Params: { person_id: string } }>('/v1/accounts/members/:person_id', async (req) => {
    const c = await caller(req);
    requireSession(c);
    const self = req.params.person_id === c.personId;
    if (!self) requireOwnerOrAdmin(c);
    const target = await existingMember(c, req.params.person_id);
    if (!self && target.role === 'owner' && c.role !== 'owner') throw new AccountError(AccountErrors.ownerOnly);
    outcome(await deps.accounts.removeMember(c.workspaceId, target.personId));
    deps.log.info({ tenant_id: c.workspaceId, person_id: target.personId, by: c.personId }, 'member removed');
    return { object: 'member', person_id: target.personId, deleted: true };
  });

  app.get('/v1/accounts/keys', async (req) => {
    const c = await caller(req);
    const keys = await deps.store.listKeys(c.workspaceId);
    const people = await Promise.all(keys.map((k) => deps.accounts.getKeyPerson(k.id)));
    return { object: 'list', data: keys.map((k, i) => keyView(k, people[i] ?? null, brand)) };
  });

  app.post('/v1/accounts/keys', async (req, reply) => {
    const c = await caller(req);
    requireSession(c);
    const body = parseWith(CreateKeyBody, 'body', req.body ?? {});
    let issued;
    try {
      issued = await issueKey(deps.store, brand, { tenantId: c.workspaceId, name: body.name, scopes: body.scopes, allowedIps: body.allowed_ips });
    } catch (err) {
      if (err instanceof OperatorError) throw new AccountError(AccountErrors.notFound);
      throw err;
    }
    await deps.accounts.setKeyPerson(issued.record.id, c.personId as string);
    deps.log.info({ tenant_id: c.workspaceId, key_id: issued.record.id, person_id: c.personId }, 'key issued');
    return reply.code(201).send({ ...keyView(issued.record, c.personId, brand), key: issued.key });
  });

  app.delete<{ Params: { key_id: string } }>('/v1/accounts/keys/:key_id', async (req) => {
    const c = await caller(req);
    requireSession(c);
    const key = await deps.store.getKeyById(req.params.key_id);
    if (!key || key.tenantId !== c.workspaceId) throw new AccountError(AccountErrors.keyNotFound);
    const owner = await deps.accounts.getKeyPerson(key.id);
    if (owner !== c.personId) requireOwnerOrAdmin(c);
    const revoked = (await deps.store.revokeKey(key.id, now())) ?? key;
    await deps.onKeyRevoked(key.hash);
    deps.log.info({ tenant_id: c.workspaceId, key_id: key.id, by: c.personId }, 'key revoked');
    return keyView(revoked, owner, brand);
  });

  async function manager(req: FastifyRequest): Promise<Caller> {
    const c = await caller(req);
    requireSession(c);
    requireOwnerOrAdmin(c);
    return c;
  }
  async function existingMember(c: Caller, personId: string): Promise<Member> {
    const m = await deps.accounts.getMember(c.workspaceId, personId);
    if (m === null || m === 'removed') throw new AccountError(AccountErrors.memberNotFound);
    return m;
  }
}

function outcome(result: 'ok' | 'not_found' | 'last_owner'): void {
  if (result === 'not_found') throw new AccountError(AccountErrors.memberNotFound);
  if (result === 'last_owner') throw new AccountError(AccountErrors.lastOwner);
}

export const memberView = (m: Member) => ({ object: 'member', person_id: m.personId, role: m.role, added_at: m.addedAt });

/** Never the key or its hash: the prefix and the last four characters. */
export const keyView = (k: KeyRecord, personId: string | null, brand: string) => ({
  object: 'api_key',
  id: k.id,
  name: k.name,
  display: `${keyPrefix(brand)}…${k.last4}`,
  prefix: keyPrefix(brand),
  last4: k.last4,
  scopes: k.scopes,
  allowed_ips: k.allowedIps,
  status: k.status,
  person_id: personId,
  created_at: k.createdAt,
  revoked_at: k.revokedAt,
});
