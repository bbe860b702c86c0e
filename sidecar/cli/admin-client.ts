/** A small client of the sidecar's operator API (used by the CLI, `npm start` and the tests). */
export interface KeyCreated {
  key: string;
  id: string;
  tenant_id: string;
  name: string;
  display: string;
  scopes: string[];
  allowed_ips: string[] | null;
  status: string;
}

export interface LedgerEntryView {
  id: string;
  time: string;
  type: 'grant' | 'deduct' | 'charge';
  amount: number;
  balanceAfter: number;
  requestId: string | null;
  reason: string | null;
}

export interface MemberView {
  person_id: string;
  role: string;
  added_at: string;
}

export interface TierView {
  id: string;
  amount: number;
  label: string;
}

export interface UsageRecordView {
  time: string;
  keyId: string | null;
  alias: string;
  internalModel: string;
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
  requestCount: number;
  requestId: string;
  cost: number;
  estimated: boolean;
}

export class AdminError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
    this.name = 'AdminError';
  }
}

/** The operator API did not answer at all (nothing listening, wrong host): names the URL and how to point elsewhere. */
export class AdminUnreachableError extends Error {
  constructor(readonly url: string, cause: string) {
    super(
      `could not reach the operator API at ${url} (${cause}). Is the gateway running (npm start prints its "Operator API" URL)? ` +
        'Point the CLI elsewhere with ADMIN_URL=http://host:port.',
    );
    this.name = 'AdminUnreachableError';
  }
}

export class AdminClient {
  constructor(
    private readonly baseUrl: string,
    private readonly token: string,
  ) {}

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    let res: Response;
    try {
      res = await fetch(`${this.baseUrl}${path}`, {
        method,
        headers: { authorization: `Bearer ${this.token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (err) {
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      throw new AdminUnreachableError(this.baseUrl, cause?.code ?? cause?.message ?? (err as Error).message);
    }
    const text = await res.text();
    const parsed = text ? (JSON.parse(text) as unknown) : {};
    if (!res.ok) {
      const { error, problems } = parsed as { error?: string; problems?: string[] };
      const why = Array.isArray(problems) && problems.length ? `:\n  - ${problems.join('\n  - ')}` : '';
      throw new AdminError(res.status, `${error ?? `HTTP ${res.status}`}${why}`);
    }
    return parsed as T;
  }

  createTenant(name: string) {
    return this.call<{ id: string; name: string; created_at: string }>('POST', '/admin/tenants', { name });
  }
  listTenants() {
    return this.call<{ data: Array<{ id: string; name: string; created_at: string }> }>('GET', '/admin/tenants');
  }
  createKey(tenantId: string, opts: { name?: string; scopes?: string[]; allowed_ips?: string[] | null; person_id?: string } = {}) {
    return this.call<KeyCreated>('POST', `/admin/tenants/${encodeURIComponent(tenantId)}/keys`, opts);
  }
  listKeys(tenantId: string) {
    return this.call<{ data: Array<Omit<KeyCreated, 'key'>> }>('GET', `/admin/tenants/${encodeURIComponent(tenantId)}/keys`);
  }
  adjustCredits(tenantId: string, amount: number, idempotencyKey: string, reason = '') {
    return this.call<LedgerEntryView & { replayed: boolean; currency: string }>('POST', `/admin/tenants/${encodeURIComponent(tenantId)}/credits`, { amount, idempotency_key: idempotencyKey, reason });
  }
  setCap(tenantId: string, amount: number | null) {
    return this.call<{ tenant_id: string; spend_cap: number | null; currency: string }>('PUT', `/admin/tenants/${encodeURIComponent(tenantId)}/cap`, { amount });
  }
  account(tenantId: string) {
    return this.call<{ tenant_id: string; period: string; currency: string; balance: number; held: number; leased: number; cap: number | null; spent: number }>(
      'GET',
      `/admin/tenants/${encodeURIComponent(tenantId)}/account`,
    );
  }
  ledger(tenantId: string, limit = 100) {
    return this.call<{ currency: string; data: LedgerEntryView[] }>('GET', `/admin/tenants/${encodeURIComponent(tenantId)}/ledger?limit=${limit}`);
  }
  usageRecords(tenantId: string, limit = 100) {
    return this.call<{ currency: string; data: UsageRecordView[] }>(
      'GET',
      `/admin/tenants/${encodeURIComponent(tenantId)}/usage-records?limit=${limit}`,
    );
  }
  /** Re-reads the configuration file on that instance and applies it on every instance. */
  reloadConfig() {
    return this.call<{ status: 'applied' | 'unchanged'; generation: number; aliases_moved: string[] }>('POST', '/admin/config/reload');
  }
  listMembers(tenantId: string) {
    return this.call<{ data: MemberView[] }>('GET', `/admin/tenants/${encodeURIComponent(tenantId)}/members`);
  }
  /** Puts a person in a workspace with a role (whatever was there; a workspace still keeps an owner). */
  setMember(tenantId: string, personId: string, role: 'owner' | 'admin' | 'member') {
    return this.call<MemberView>('PUT', `/admin/tenants/${encodeURIComponent(tenantId)}/members/${encodeURIComponent(personId)}`, { role });
  }
  removeMember(tenantId: string, personId: string) {
    return this.call<{ person_id: string; deleted: boolean }>('DELETE', `/admin/tenants/${encodeURIComponent(tenantId)}/members/${encodeURIComponent(personId)}`);
  }
  tiers() {
    return this.call<{ data: TierView[]; source: string }>('GET', '/admin/tiers');
  }
  setTiers(tiers: TierView[] | null) {
    return this.call<{ data: TierView[] }>('PUT', '/admin/tiers', { tiers });
  }
  revokeKey(keyId: string) {
    return this.call<Omit<KeyCreated, 'key'>>('POST', `/admin/keys/${encodeURIComponent(keyId)}/revoke`, {});
  }
}
