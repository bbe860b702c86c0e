import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { AdminClient, AdminError } from './admin-client.js';
import { mintSession } from '../stack/dev-idp.js';

/**
 * Operator CLI against the running stack's operator API.
 *   ADMIN_URL   (default http://127.0.0.1:8090)
 *   ADMIN_TOKEN or ADMIN_TOKEN_FILE (default .run/admin-token)
 */
const HELP = `usage: npm run cli -- <command> [options]

  tenant create --name NAME            create a tenant, print its id
  tenant list                          list tenants
  key create --tenant ID [--name N] [--scopes ai,...] [--allowed-ips 203.0.113.7,10.0.0.0/8] [--person P]
                                       issue a key (acting as person P for the owner rule);
                                       the key is printed once
  key list --tenant ID                 list a tenant's keys (never the key itself)
  key revoke KEY_ID                    revoke a key
  credits grant --tenant ID --amount 12.50 [--key IDEMPOTENCY_KEY] [--reason TEXT]
  credits deduct --tenant ID --amount 2 [--key …] [--reason …]
                                       amounts in currency units (up to 6 decimals); the
                                       key makes a retry safe (default: a fresh one)
  cap set --tenant ID --amount 100     monthly spend cap; cap clear --tenant ID removes it
  account --tenant ID                  balance, held, this month's spend and cap
  ledger --tenant ID [--limit 50]      money movements, newest first
  config reload                        re-read the configuration file and apply it on every
                                       instance (alias moves, prices, limits); refused as a
                                       whole, with the reasons, if anything is wrong
  member list --tenant ID              people of a workspace (tenant) and their roles
  member set --tenant ID --person P --role owner|admin|member
                                       put a person in a workspace with a role
  member remove --tenant ID --person P remove a person (a workspace always keeps an owner)
  tier list                            credit tiers on offer
  tier set --tiers ID=AMOUNT[,ID=AMOUNT…]   replace them (amounts in currency units)
  tier reset                           back to the configured tiers
  session mint --user ID --workspace TENANT[:role] [--workspace …] [--ttl 3600] [--claim-only]
                                       mint a platform session token with the local
                                       development identity provider (.run/dev-idp; DEV_IDP_DIR);
                                       the roles are also recorded (operator API) unless --claim-only
  payments token --card NUMBER         tokenise a test card with the payment simulator
                                       (PAYMENTS_URL, default http://127.0.0.1:8082)
  payments behaviour --token TOK --set succeed|decline|insufficient_funds|transient
  payments charges                     charges the simulator has seen, newest first

  --json                               machine-readable output
`;

function client(): AdminClient {
  const url = process.env.ADMIN_URL || 'http://127.0.0.1:8090';
  const token = process.env.ADMIN_TOKEN || readFileSync(process.env.ADMIN_TOKEN_FILE || '.run/admin-token', 'utf8').trim();
  return new AdminClient(url, token);
}

const list = (v: string | undefined) => (v === undefined ? undefined : v.split(',').map((s) => s.trim()).filter(Boolean));

async function run(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      name: { type: 'string' },
      tenant: { type: 'string' },
      scopes: { type: 'string' },
      'allowed-ips': { type: 'string' },
      user: { type: 'string' },
      person: { type: 'string' },
      role: { type: 'string' },
      tiers: { type: 'string' },
      card: { type: 'string' },
      token: { type: 'string' },
      set: { type: 'string' },
      'claim-only': { type: 'boolean', default: false },
      workspace: { type: 'string', multiple: true },
      ttl: { type: 'string' },
      amount: { type: 'string' },
      key: { type: 'string' },
      reason: { type: 'string' },
      limit: { type: 'string' },
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  const [noun, verb, arg] = positionals;
  const out = (human: string, data: unknown) => process.stdout.write(values.json ? `${JSON.stringify(data)}\n` : `${human}\n`);
  const need = (v: string | undefined, what: string): string => {
    if (!v) throw new UsageError(`${what} is required`);
    return v;
  };

  if (values.help || !noun || noun === 'help') {
    process.stdout.write(HELP);
    return 0;
  }
  if (noun === 'session' && verb === 'mint') {
    const dir = process.env.DEV_IDP_DIR || '.run/dev-idp';
    const userId = need(values.user, '--user');
    const workspaces = values.workspace ?? [];
    const token = await mintSession(join(dir, 'private.jwk'), { userId, workspaces, ttlSeconds: values.ttl ? Number(values.ttl) : undefined });
    if (!values['claim-only']) {
      const api = client();
      for (const w of workspaces) {
        const [id, role = 'owner'] = w.split(':');
        await api.setMember(id as string, userId, asRole(role));
      }
    }
    out(token, { token });
    return 0;
  }
  if (noun === 'payments') {
    const base = (process.env.PAYMENTS_URL || 'http://127.0.0.1:8082').replace(/\/$/, '');
    const sim = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${base}${path}`, { method, headers: body ? { 'content-type': 'application/json' } : {}, body: body ? JSON.stringify(body) : undefined });
      const data = (await res.json()) as Record<string, unknown>;
      if (!res.ok) throw new Error(`payment simulator: HTTP ${res.status} ${JSON.stringify(data)}`);
      return data;
    };
    if (verb === 'token') {
      const t = await sim('POST', '/v1/tokens', { number: need(values.card, '--card') });
      out(`${String(t.id)}  (${String(t.brand)} …${String(t.last4)})`, t);
    } else if (verb === 'behaviour') {
      const t = await sim('POST', `/v1/tokens/${encodeURIComponent(need(values.token, '--token'))}/behaviour`, { behaviour: need(values.set, '--set') });
      out(`${String(t.id)} now ${String(t.behaviour)}`, t);
    } else if (verb === 'charges') {
      const { data } = (await sim('GET', '/v1/charges')) as { data: Array<Record<string, unknown>> };
      out(data.map((c) => `${String(c.created)}\t${String(c.id)}\t${String(c.status)}\t${fromMicros(Number(c.amount))}\t${String(c.token)}`).join('\n'), data);
    } else throw new UsageError(`unknown command: ${positionals.join(' ')}`);
    return 0;
  }
  const api = client();
  if (noun === 'tenant' && verb === 'create') {
    const t = await api.createTenant(need(values.name, '--name'));
    out(t.id, t);
  } else if (noun === 'tenant' && verb === 'list') {
    const { data } = await api.listTenants();
    out(data.map((t) => `${t.id}\t${t.created_at}\t${t.name}`).join('\n'), data);
  } else if (noun === 'key' && verb === 'create') {
    const allowed = list(values['allowed-ips']);
    const k = await api.createKey(need(values.tenant, '--tenant'), {
      name: values.name,
      ...(values.person ? { person_id: values.person } : {}),
      scopes: list(values.scopes),
      ...(allowed ? { allowed_ips: allowed } : {}),
    });
    out(`${k.key}\n# key id ${k.id}, scopes ${k.scopes.join(' ')}${k.allowed_ips ? `, allowed_ips ${k.allowed_ips.join(' ')}` : ''}. Shown once: store it now.`, k);
  } else if (noun === 'key' && verb === 'list') {
    const { data } = await api.listKeys(need(values.tenant, '--tenant'));
    out(data.map((k) => `${k.id}\t${k.status}\t${k.display}\t${k.scopes.join(' ')}`).join('\n'), data);
  } else if (noun === 'credits' && (verb === 'grant' || verb === 'deduct')) {
    const micros = toMicros(need(values.amount, '--amount'));
    const e = await api.adjustCredits(need(values.tenant, '--tenant'), verb === 'grant' ? micros : -micros, values.key ?? randomUUID(), values.reason ?? '');
    out(`${e.type} ${fromMicros(e.amount)}; balance ${fromMicros(e.balanceAfter)} (entry ${e.id})`, e);
  } else if (noun === 'cap' && (verb === 'set' || verb === 'clear')) {
    const r = await api.setCap(need(values.tenant, '--tenant'), verb === 'set' ? toMicros(need(values.amount, '--amount')) : null);
    out(r.spend_cap === null ? 'no spend cap' : `spend cap ${fromMicros(r.spend_cap)} per month`, r);
  } else if (noun === 'account') {
    const a = await api.account(need(values.tenant, '--tenant'));
    out(`balance ${fromMicros(a.balance)}, held ${fromMicros(a.held)}, spent in ${a.period} ${fromMicros(a.spent)}, cap ${a.cap === null ? 'none' : fromMicros(a.cap)}`, a);
  } else if (noun === 'ledger') {
    const { data } = await api.ledger(need(values.tenant, '--tenant'), values.limit ? Number(values.limit) : 50);
    out(data.map((e) => `${e.time}\t${e.type}\t${fromMicros(e.amount)}\t${fromMicros(e.balanceAfter)}\t${e.requestId ?? e.reason ?? ''}`).join('\n'), data);
  } else if (noun === 'config' && verb === 'reload') {
    const r = await api.reloadConfig();
    out(`${r.status}: generation ${r.generation}${r.aliases_moved.length ? `, moved ${r.aliases_moved.join(', ')}` : ''}`, r);
  } else if (noun === 'member' && verb === 'list') {
    const { data } = await api.listMembers(need(values.tenant, '--tenant'));
    out(data.map((m) => `${m.person_id}\t${m.role}\t${m.added_at}`).join('\n'), data);
  } else if (noun === 'member' && verb === 'set') {
    const m = await api.setMember(need(values.tenant, '--tenant'), need(values.person, '--person'), asRole(need(values.role, '--role')));
    out(`${m.person_id} ${m.role}`, m);
  } else if (noun === 'member' && verb === 'remove') {
    const r = await api.removeMember(need(values.tenant, '--tenant'), need(values.person, '--person'));
    out(`${r.person_id} removed`, r);
  } else if (noun === 'tier' && (verb === 'list' || verb === 'set' || verb === 'reset')) {
    const tiers =
      verb === 'list'
        ? (await api.tiers()).data
        : (
            await api.setTiers(
              verb === 'reset'
                ? null
                : need(values.tiers, '--tiers')
                    .split(',')
                    .map((pair) => {
                      const [id = '', amount = ''] = pair.split('=');
                      return { id: id.trim(), amount: toMicros(amount), label: amount.trim() };
                    }),
            )
          ).data;
    out(tiers.map((t) => `${t.id}\t${fromMicros(t.amount)}`).join('\n'), tiers);
  } else if (noun === 'key' && verb === 'revoke') {
    const k = await api.revokeKey(need(arg, 'KEY_ID'));
    out(`${k.id} ${k.status}`, k);
  } else {
    throw new UsageError(`unknown command: ${positionals.join(' ')}`);
  }
  return 0;
}

class UsageError extends Error {}

function asRole(role: string): 'owner' | 'admin' | 'member' {
  if (role !== 'owner' && role !== 'admin' && role !== 'member') throw new UsageError('role must be owner, admin or member');
  return role;
}

/** "12.5" (currency units) → 12500000 micro-units, exactly (no floating point). */
function toMicros(text: string): number {
  const m = /^(\d{1,12})(?:\.(\d{1,6}))?$/.exec(text.trim());
  if (!m) throw new UsageError('amount must be a positive number with at most 6 decimals');
  const micros = Number(m[1]) * 1_000_000 + Number((m[2] ?? '').padEnd(6, '0'));
  if (micros <= 0) throw new UsageError('amount must be positive');
  return micros;
}

function fromMicros(micros: number): string {
  const sign = micros < 0 ? '-' : '';
  const abs = Math.abs(micros);
  return `${sign}${Math.floor(abs / 1_000_000)}.${String(abs % 1_000_000).padStart(6, '0')}`;
}

run(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    if (err instanceof UsageError) process.stderr.write(`${err.message}\n\n${HELP}`);
    else if (err instanceof AdminError) process.stderr.write(`error: ${err.message} (HTTP ${err.status})\n`);
    else process.stderr.write(`error: ${(err as Error).message}\n`);
    process.exit(err instanceof UsageError ? 2 : 1);
  },
);
