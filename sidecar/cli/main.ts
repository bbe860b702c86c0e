import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
import { AdminClient, AdminError, AdminUnreachableError } from './admin-client.js';
import { mintSession } from '../stack/dev-idp.js';

/**
 * Operator CLI against the running stack's operator API.
 *   ADMIN_URL   (default http://127.0.0.1:8090)
 *   ADMIN_TOKEN or ADMIN_TOKEN_FILE (default .run/admin-token)
 */
export const DEFAULT_ADMIN_URL = 'http://127.0.0.1:8090';

const HELP = `usage: npm run cli -- <command> [options]

  tenant create --name NAME            create a tenant, print its id
  tenant list                          list tenants
  key create --tenant ID [--name N] [--scopes ai] [--allowed-ips 203.0.113.7,10.0.0.0/8] [--person P] [--out FILE]
                                       issue a key (acting as person P for the owner rule); the key
                                       is printed once, or written to a new FILE (mode 0600) and not printed
  key list --tenant ID                 a tenant's keys: id, status, name, scopes, allowed addresses
  key revoke KEY_ID                    revoke a key
  credits grant --tenant ID --amount 12.50 [--key IDEMPOTENCY_KEY] [--reason TEXT]
  credits deduct --tenant ID --amount 2 [--key …] [--reason …]
                                       amounts in currency units (up to 6 decimals); the
                                       same --key is applied once ("already applied")
  cap set --tenant ID --amount 100     monthly spend cap; cap clear --tenant ID removes it
  account --tenant ID                  balance, held, this month's spend and cap
  ledger --tenant ID [--limit 50]      money movements, newest first
  usage --tenant ID [--limit 50]       one record per request, newest first
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

  --json                               machine-readable output (money in integer micro-units)

  The operator API is at ADMIN_URL (default ${DEFAULT_ADMIN_URL}); its token is
  ADMIN_TOKEN, or the file ADMIN_TOKEN_FILE (default .run/admin-token).
`;

/** Scopes a key may carry: the gateway defines exactly one. */
export const KNOWN_SCOPES = ['ai'] as const;

const OPTIONS = {
  name: { type: 'string' },
  tenant: { type: 'string' },
  scopes: { type: 'string' },
  'allowed-ips': { type: 'string' },
  user: { type: 'string' },
  workspace: { type: 'string', multiple: true },
  ttl: { type: 'string' },
  amount: { type: 'string' },
  key: { type: 'string' },
  reason: { type: 'string' },
  limit: { type: 'string' },
  out: { type: 'string' },
  person: { type: 'string' },
  role: { type: 'string' },
  tiers: { type: 'string' },
  card: { type: 'string' },
  token: { type: 'string' },
  set: { type: 'string' },
  'claim-only': { type: 'boolean' },
  json: { type: 'boolean', default: false },
  help: { type: 'boolean', default: false },
} as const;
type Option = keyof typeof OPTIONS;

/** Each command: its words, its positional arguments and the options it takes (json and help go everywhere). */
const COMMANDS: ReadonlyArray<{ words: readonly string[]; args?: readonly string[]; options: readonly Option[] }> = [
  { words: ['tenant', 'create'], options: ['name'] },
  { words: ['tenant', 'list'], options: [] },
  { words: ['key', 'create'], options: ['tenant', 'name', 'scopes', 'allowed-ips', 'person', 'out'] },
  { words: ['key', 'list'], options: ['tenant'] },
  { words: ['key', 'revoke'], args: ['KEY_ID'], options: [] },
  { words: ['credits', 'grant'], options: ['tenant', 'amount', 'key', 'reason'] },
  { words: ['credits', 'deduct'], options: ['tenant', 'amount', 'key', 'reason'] },
  { words: ['cap', 'set'], options: ['tenant', 'amount'] },
  { words: ['cap', 'clear'], options: ['tenant'] },
  { words: ['account'], options: ['tenant'] },
  { words: ['ledger'], options: ['tenant', 'limit'] },
  { words: ['usage'], options: ['tenant', 'limit'] },
  { words: ['config', 'reload'], options: [] },
  { words: ['member', 'list'], options: ['tenant'] },
  { words: ['member', 'set'], options: ['tenant', 'person', 'role'] },
  { words: ['member', 'remove'], options: ['tenant', 'person'] },
  { words: ['tier', 'list'], options: [] },
  { words: ['tier', 'set'], options: ['tiers'] },
  { words: ['tier', 'reset'], options: [] },
  { words: ['session', 'mint'], options: ['user', 'workspace', 'ttl', 'claim-only'] },
  { words: ['payments', 'token'], options: ['card'] },
  { words: ['payments', 'behaviour'], options: ['token', 'set'] },
  { words: ['payments', 'charges'], options: [] },
];

export class UsageError extends Error {}

function client(): AdminClient {
  const url = process.env.ADMIN_URL || DEFAULT_ADMIN_URL;
  if (process.env.ADMIN_TOKEN) return new AdminClient(url, process.env.ADMIN_TOKEN);
  const file = process.env.ADMIN_TOKEN_FILE || '.run/admin-token';
  let token: string;
  try {
    token = readFileSync(file, 'utf8').trim();
  } catch {
    throw new UsageError(`no operator token: ${file} cannot be read (npm start writes it). Set ADMIN_TOKEN, or ADMIN_TOKEN_FILE to the token's file.`);
  }
  return new AdminClient(url, token);
}

const list = (v: string | undefined) => (v === undefined ? undefined : v.split(',').map((s) => s.trim()).filter(Boolean));

function parse(argv: string[]) {
  try {
    return parseArgs({ args: argv, allowPositionals: true, strict: true, options: OPTIONS });
  } catch (err) {
    // Unknown flags, or a flag without its value.
    throw new UsageError((err as Error).message.split('\n')[0] ?? 'bad arguments');
  }
}

async function run(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv);
  if (values.help || positionals.length === 0 || positionals[0] === 'help') {
    process.stdout.write(HELP);
    return 0;
  }
  const command = COMMANDS.find((c) => c.words.every((w, i) => positionals[i] === w));
  if (!command) throw new UsageError(`unknown command: ${positionals.slice(0, 2).join(' ')}`);
  const args = positionals.slice(command.words.length);
  const expected = command.args ?? [];
  if (args.length > expected.length) throw new UsageError(`unexpected argument "${args[expected.length]}" after "${command.words.join(' ')}" (options start with --)`);
  for (const opt of Object.keys(values) as Option[]) {
    if (opt === 'json' || opt === 'help') continue;
    if (!command.options.includes(opt)) throw new UsageError(`"${command.words.join(' ')}" takes no --${opt}`);
  }
  const arg = (i: number): string => {
    const v = args[i];
    if (!v) throw new UsageError(`${expected[i]} is required`);
    return v;
  };
  const need = (v: string | undefined, what: string): string => {
    if (!v) throw new UsageError(`${what} is required`);
    return v;
  };
  const out = (human: string, data: unknown) => process.stdout.write(values.json ? `${JSON.stringify(data)}\n` : `${human}\n`);
  const name = command.words.join(' ');

  if (name === 'session mint') {
    const dir = process.env.DEV_IDP_DIR || '.run/dev-idp';
    const userId = need(values.user, '--user');
    const workspaces = values.workspace ?? [];
    const token = await mintSession(join(dir, 'private.jwk'), { userId, workspaces, ttlSeconds: values.ttl ? Number(values.ttl) : undefined });
    if (!values['claim-only']) {
      // The roles the token claims are recorded too, so the account service sees them.
      const api = client();
      for (const w of workspaces) {
        const [id, role = 'owner'] = w.split(':');
        await api.setMember(id as string, userId, asRole(role));
      }
    }
    out(token, { token });
    return 0;
  }
  if (command.words[0] === 'payments') {
    await payments(command.words[1] as string, values, out, need);
    return 0;
  }
  const api = client();
  switch (name) {
    case 'tenant create': {
      const t = await api.createTenant(need(values.name, '--name'));
      out(t.id, t);
      break;
    }
    case 'tenant list': {
      const { data } = await api.listTenants();
      out(data.map((t) => `${t.id}\t${t.created_at}\t${t.name}`).join('\n'), data);
      break;
    }
    case 'key create': {
      const scopes = list(values.scopes);
      const unknown = scopes?.filter((s) => !(KNOWN_SCOPES as readonly string[]).includes(s)) ?? [];
      if (unknown.length) throw new UsageError(`unknown scope ${unknown.join(', ')}: the gateway knows only ${KNOWN_SCOPES.join(', ')}`);
      const allowed = list(values['allowed-ips']);
      const k = await api.createKey(need(values.tenant, '--tenant'), {
        name: values.name,
        scopes,
        ...(allowed ? { allowed_ips: allowed } : {}),
        ...(values.person ? { person_id: values.person } : {}),
      });
      const about = `key id ${k.id}, scopes ${k.scopes.join(' ')}${k.allowed_ips ? `, allowed_ips ${k.allowed_ips.join(' ')}` : ''}`;
      if (values.out) {
        writeFileSync(values.out, `${k.key}\n`, { mode: 0o600, flag: 'wx' }); // never overwrites a file
        const { key: _shownOnce, ...record } = k;
        out(`${k.id}\n# ${about}; the key is in ${values.out} (mode 0600) and shown nowhere else.`, { ...record, key_file: values.out });
      } else {
        out(`${k.key}\n# ${about}. Shown once: store it now.`, k);
      }
      break;
    }
    case 'key list': {
      const { data } = await api.listKeys(need(values.tenant, '--tenant'));
      const rows = data.map((k) => [k.id, k.status, k.display, k.name || '-', k.scopes.join(' '), k.allowed_ips ? k.allowed_ips.join(' ') : 'any address'].join('\t'));
      out(['id\tstatus\tkey\tname\tscopes\tallowed addresses', ...rows].join('\n'), data);
      break;
    }
    case 'key revoke': {
      const k = await api.revokeKey(arg(0));
      out(`${k.id} ${k.status}`, k);
      break;
    }
    case 'credits grant':
    case 'credits deduct': {
      const micros = toMicros(need(values.amount, '--amount'));
      const key = values.key ?? randomUUID();
      const e = await api.adjustCredits(need(values.tenant, '--tenant'), command.words[1] === 'grant' ? micros : -micros, key, values.reason ?? '');
      const money = (m: number) => `${fromMicros(m)} ${e.currency}`;
      out(
        e.replayed
          ? `already applied (key ${key}): ${e.type} ${money(e.amount)} at ${e.time}; nothing changed (balance then ${money(e.balanceAfter)}, entry ${e.id})`
          : `${e.type} ${money(e.amount)}; balance ${money(e.balanceAfter)} (entry ${e.id}, key ${key})`,
        e,
      );
      break;
    }
    case 'cap set':
    case 'cap clear': {
      const r = await api.setCap(need(values.tenant, '--tenant'), command.words[1] === 'set' ? toMicros(need(values.amount, '--amount')) : null);
      out(r.spend_cap === null ? 'no spend cap' : `spend cap ${fromMicros(r.spend_cap)} ${r.currency} per calendar month (UTC)`, r);
      break;
    }
    case 'account': {
      const a = await api.account(need(values.tenant, '--tenant'));
      const money = (m: number) => `${fromMicros(m)} ${a.currency}`;
      out(`balance ${money(a.balance)}, held ${money(a.held)}, spent in ${a.period} ${money(a.spent)}, cap ${a.cap === null ? 'none' : money(a.cap)}, set aside in credit leases ${money(a.leased)}`, a);
      break;
    }
    case 'ledger': {
      const { data, currency } = await api.ledger(need(values.tenant, '--tenant'), limitOf(values.limit));
      const rows = data.map((e) => `${e.time}\t${e.type}\t${fromMicros(e.amount)}\t${fromMicros(e.balanceAfter)}\t${e.requestId ?? e.reason ?? ''}`);
      out([`time\ttype\tamount ${currency}\tbalance after\trequest id or reason`, ...rows].join('\n'), data);
      break;
    }
    case 'config reload': {
      const r = await api.reloadConfig();
      out(`${r.status}: generation ${r.generation}${r.aliases_moved.length ? `, moved ${r.aliases_moved.join(', ')}` : ''}`, r);
      break;
    }
    case 'member list': {
      const { data } = await api.listMembers(need(values.tenant, '--tenant'));
      out(data.map((m) => `${m.person_id}\t${m.role}\t${m.added_at}`).join('\n'), data);
      break;
    }
    case 'member set': {
      const m = await api.setMember(need(values.tenant, '--tenant'), need(values.person, '--person'), asRole(need(values.role, '--role')));
      out(`${m.person_id} ${m.role}`, m);
      break;
    }
    case 'member remove': {
      const r = await api.removeMember(need(values.tenant, '--tenant'), need(values.person, '--person'));
      out(`${r.person_id} removed`, r);
      break;
    }
    case 'tier list':
    case 'tier set':
    case 'tier reset': {
      const verb = command.words[1];
      const tiers =
        verb === 'list'
          ? (await api.tiers()).data
          : (await api.setTiers(verb === 'reset' ? null : need(values.tiers, '--tiers').split(',').map(tierOf))).data;
      out(tiers.map((t) => `${t.id}\t${fromMicros(t.amount)}`).join('\n'), tiers);
      break;
    }
    case 'usage': {
      const { data, currency } = await api.usageRecords(need(values.tenant, '--tenant'), limitOf(values.limit));
      const rows = data.map((r) =>
        [r.time, r.keyId ?? '-', r.alias, r.promptTokens, r.completionTokens, r.requestCount, `${fromMicros(r.cost)}${r.estimated ? ' (estimated)' : ''}`, r.requestId].join('\t'),
      );
      out([`time\tkey\talias\tprompt\tcompletion\trequests\tcost ${currency}\trequest id`, ...rows].join('\n'), data);
      break;
    }
  }
  return 0;
}

/** "small=5" → a tier of 5 currency units. */
function tierOf(pair: string) {
  const [id = '', amount = ''] = pair.split('=');
  return { id: id.trim(), amount: toMicros(amount), label: amount.trim() };
}

function asRole(role: string): 'owner' | 'admin' | 'member' {
  if (role !== 'owner' && role !== 'admin' && role !== 'member') throw new UsageError('role must be owner, admin or member');
  return role;
}

/** The payment simulator's own test API (cards to tokens, card behaviour, charges seen). */
async function payments(
  verb: string,
  values: { card?: string; token?: string; set?: string },
  out: (human: string, data: unknown) => void,
  need: (v: string | undefined, what: string) => string,
) {
  const base = (process.env.PAYMENTS_URL || 'http://127.0.0.1:8082').replace(/\/$/, '');
  const sim = async (method: string, path: string, body?: unknown) => {
    let res: Response;
    try {
      res = await fetch(`${base}${path}`, { method, headers: body ? { 'content-type': 'application/json' } : {}, body: body ? JSON.stringify(body) : undefined });
    } catch {
      throw new Error(`cannot reach the payment simulator at ${base} (set PAYMENTS_URL to point elsewhere)`);
    }
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
  } else {
    const { data } = (await sim('GET', '/v1/charges')) as { data: Array<Record<string, unknown>> };
    out(data.map((c) => `${String(c.created)}\t${String(c.id)}\t${String(c.status)}\t${fromMicros(Number(c.amount))}\t${String(c.token)}`).join('\n'), data);
  }
}

function limitOf(text: string | undefined): number {
  if (text === undefined) return 50;
  if (!/^\d{1,5}$/.test(text) || Number(text) < 1) throw new UsageError('--limit must be a whole number from 1');
  return Number(text);
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

if (import.meta.url === pathToFileURL(resolve(process.argv[1] ?? '')).href) {
  run(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err: unknown) => {
      if (err instanceof UsageError) process.stderr.write(`${err.message}\n\n${HELP}`);
      else if (err instanceof AdminUnreachableError) process.stderr.write(`error: ${err.message}\n`);
      else if (err instanceof AdminError) process.stderr.write(`error: ${err.message} (HTTP ${err.status})\n`);
      else process.stderr.write(`error: ${(err as Error).message}\n`);
      process.exit(err instanceof UsageError ? 2 : 1);
    },
  );
}
