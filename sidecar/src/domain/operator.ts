import type { KeyRecord, Store, TenantRecord } from '../store/contract.js';
import { isValidAllowlistEntry } from './auth/ip-allowlist.js';
import { generateApiKey, hashApiKey, keyPrefix, newKeyId, newTenantId } from './auth/keys.js';

/**
 * Operator actions on tenants and keys (used by the admin API and so by the
 * operator CLI). Keys are returned in clear exactly once, at issuance.
 */

export class OperatorError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
    this.name = 'OperatorError';
  }
}

export interface KeyView {
  id: string;
  tenant_id: string;
  name: string;
  display: string;
  scopes: readonly string[];
  allowed_ips: readonly string[] | null;
  status: string;
  created_at: string;
  revoked_at: string | null;
}

export function keyView(k: KeyRecord, brand: string): KeyView {
  return {
    id: k.id,
    tenant_id: k.tenantId,
    name: k.name,
    display: `${keyPrefix(brand)}…${k.last4}`,
    scopes: k.scopes,
    allowed_ips: k.allowedIps,
    status: k.status,
    created_at: k.createdAt,
    revoked_at: k.revokedAt,
  };
}

const now = () => new Date().toISOString();

export async function createTenant(store: Store, name: string): Promise<TenantRecord> {
  const clean = name.trim();
  if (!clean || clean.length > 200) throw new OperatorError(400, 'name must be 1-200 characters');
  const tenant = { id: newTenantId(), name: clean, createdAt: now() };
  await store.createTenant(tenant);
  return tenant;
}

export interface IssueKeyInput {
  readonly tenantId: string;
  readonly name?: string | undefined;
  readonly scopes?: readonly string[] | undefined;
  readonly allowedIps?: readonly string[] | null | undefined;
}

export async function issueKey(store: Store, brand: string, input: IssueKeyInput): Promise<{ key: string; record: KeyRecord }> {
  const tenant = await store.getTenant(input.tenantId);
  if (!tenant) throw new OperatorError(404, 'unknown tenant');
  const scopes = input.scopes ?? ['ai'];
  if (!Array.isArray(scopes) || scopes.some((s) => typeof s !== 'string' || !/^[A-Za-z0-9:_*.-]{1,64}$/.test(s))) {
    throw new OperatorError(400, 'scopes must be a list of scope names');
  }
  const ips = input.allowedIps ?? null;
  if (ips !== null && (!Array.isArray(ips) || ips.length === 0 || !ips.every((e) => typeof e === 'string' && isValidAllowlistEntry(e)))) {
    throw new OperatorError(400, 'allowed_ips must be a non-empty list of addresses or CIDR ranges');
  }
  const key = generateApiKey(brand);
  const record: KeyRecord = {
    id: newKeyId(),
    tenantId: tenant.id,
    hash: hashApiKey(key),
    last4: key.slice(-4),
    name: (input.name ?? '').trim().slice(0, 200),
    scopes: [...new Set(scopes)],
    allowedIps: ips ? [...ips] : null,
    status: 'active',
    createdAt: now(),
    revokedAt: null,
  };
  await store.createKey(record);
  return { key, record };
}

export async function revokeKey(store: Store, id: string): Promise<KeyRecord> {
  const k = await store.revokeKey(id, now());
  if (!k) throw new OperatorError(404, 'unknown key');
  return k;
}
