import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
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
  key create --tenant ID [--name N] [--scopes ai,...] [--allowed-ips 203.0.113.7,10.0.0.0/8]
                                       issue a key; the key is printed once
  key list --tenant ID                 list a tenant's keys (never the key itself)
  key revoke KEY_ID                    revoke a key
  session mint --user ID --workspace TENANT[:role] [--workspace …] [--ttl 3600]
                                       mint a platform session token with the local
                                       development identity provider (.run/dev-idp; DEV_IDP_DIR)

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
      workspace: { type: 'string', multiple: true },
      ttl: { type: 'string' },
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
    const token = await mintSession(join(dir, 'private.jwk'), {
      userId: need(values.user, '--user'),
      workspaces: values.workspace ?? [],
      ttlSeconds: values.ttl ? Number(values.ttl) : undefined,
    });
    out(token, { token });
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
      scopes: list(values.scopes),
      ...(allowed ? { allowed_ips: allowed } : {}),
    });
    out(`${k.key}\n# key id ${k.id}, scopes ${k.scopes.join(' ')}${k.allowed_ips ? `, allowed_ips ${k.allowed_ips.join(' ')}` : ''}. Shown once: store it now.`, k);
  } else if (noun === 'key' && verb === 'list') {
    const { data } = await api.listKeys(need(values.tenant, '--tenant'));
    out(data.map((k) => `${k.id}\t${k.status}\t${k.display}\t${k.scopes.join(' ')}`).join('\n'), data);
  } else if (noun === 'key' && verb === 'revoke') {
    const k = await api.revokeKey(need(arg, 'KEY_ID'));
    out(`${k.id} ${k.status}`, k);
  } else {
    throw new UsageError(`unknown command: ${positionals.join(' ')}`);
  }
  return 0;
}

class UsageError extends Error {}

run(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    if (err instanceof UsageError) process.stderr.write(`${err.message}\n\n${HELP}`);
    else if (err instanceof AdminError) process.stderr.write(`error: ${err.message} (HTTP ${err.status})\n`);
    else process.stderr.write(`error: ${(err as Error).message}\n`);
    process.exit(err instanceof UsageError ? 2 : 1);
  },
);
