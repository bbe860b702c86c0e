import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AdminClient } from '../cli/admin-client.js';

/**
 * The development tenant `npm start` provides: a tenant, a key with scope
 * `ai` and a credit grant. With the in-memory store everything is new on each
 * start. With Redis (which outlives the stack) the one created before is
 * reused: its ids and key are remembered in the run directory next to the
 * store they belong to, so a restart adds nothing to a persistent store.
 */
export const DEV_CREDIT_MICROS = 100_000_000; // 100 units of the currency

export interface DevTenant {
  readonly tenantId: string;
  readonly keyId: string;
  /** The file holding the key (mode 0600): `export SVC_API_KEY="$(cat <file>)"`. */
  readonly keyFile: string;
  /** True when an earlier start's tenant was found in the store and reused. */
  readonly reused: boolean;
}

interface Remembered {
  readonly store: string;
  readonly tenantId: string;
  readonly keyId: string;
}

/** Where the key and its record live in the run directory. */
export function devTenantFiles(runDir: string) {
  return { keyFile: join(runDir, 'dev-key'), stateFile: join(runDir, 'dev-tenant.json') };
}

function remembered(stateFile: string, keyFile: string, store: string): Remembered | null {
  if (!existsSync(stateFile) || !existsSync(keyFile)) return null;
  try {
    const r = JSON.parse(readFileSync(stateFile, 'utf8')) as Remembered;
    return r.store === store && typeof r.tenantId === 'string' && typeof r.keyId === 'string' ? r : null;
  } catch {
    return null;
  }
}

/**
 * Reuses the remembered tenant when `store` names the same persistent store
 * and the tenant and its key are still there (active); creates them
 * otherwise. The grant is idempotent per tenant, so it is given once.
 * `store` is null for the in-memory store (nothing to reuse).
 */
export async function ensureDevTenant(admin: AdminClient, runDir: string, store: string | null): Promise<DevTenant> {
  const { keyFile, stateFile } = devTenantFiles(runDir);
  const before = store ? remembered(stateFile, keyFile, store) : null;
  if (before) {
    const tenants = await admin.listTenants();
    if (tenants.data.some((t) => t.id === before.tenantId)) {
      const keys = await admin.listKeys(before.tenantId);
      if (keys.data.some((k) => k.id === before.keyId && k.status === 'active')) {
        return { tenantId: before.tenantId, keyId: before.keyId, keyFile, reused: true };
      }
    }
  }
  rmSync(stateFile, { force: true });
  const tenant = await admin.createTenant('development');
  const key = await admin.createKey(tenant.id, { name: 'dev', scopes: ['ai'] });
  await admin.adjustCredits(tenant.id, DEV_CREDIT_MICROS, `dev-grant-${tenant.id}`, 'development credits');
  await admin.setMember(tenant.id, 'u_dev', 'owner'); // the development person owns the development workspace
  writeFileSync(keyFile, `${key.key}\n`, { mode: 0o600 });
  if (store) writeFileSync(stateFile, `${JSON.stringify({ store, tenantId: tenant.id, keyId: key.id } satisfies Remembered)}\n`);
  return { tenantId: tenant.id, keyId: key.id, keyFile, reused: false };
}
