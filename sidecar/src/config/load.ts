import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { ConfigSchema, modelRuleProblems, type Config } from './schema.js';
import { defaultConfig } from './defaults.js';
import { isObject } from '../util/json.js';

export class ConfigError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`invalid configuration:\n  - ${problems.join('\n  - ')}`);
    this.name = 'ConfigError';
  }
}

type Env = Readonly<Record<string, string | undefined>>;
type Plain = Record<string, unknown>;

/** Objects merge key by key; arrays and scalars from `over` replace. */
export function mergeConfig(base: Plain, over: Plain): Plain {
  const out: Plain = { ...base };
  for (const [k, v] of Object.entries(over)) {
    const b = out[k];
    out[k] = isObject(b) && isObject(v) ? mergeConfig(b, v) : v;
  }
  return out;
}

function setPath(obj: Plain, path: readonly string[], value: unknown): void {
  let node = obj;
  for (const key of path.slice(0, -1)) {
    const next = node[key];
    node = isObject(next) ? next : (node[key] = {});
  }
  node[path[path.length - 1] as string] = value;
}

/** Environment overrides for what deployers change; documented in the README. */
function applyEnv(raw: Plain, env: Env, problems: string[]): void {
  const num = (name: string, path: string[]) => {
    const v = env[name];
    if (v === undefined || v === '') return;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0 || n > 65535) problems.push(`${name}: must be a port number`);
    else setPath(raw, path, n);
  };
  const str = (name: string, path: string[]) => {
    const v = env[name];
    if (v !== undefined && v !== '') setPath(raw, path, v);
  };
  num('GATEWAY_PORT', ['listen', 'gateway', 'port']);
  str('GATEWAY_HOST', ['listen', 'gateway', 'host']);
  num('ENVOY_ADMIN_PORT', ['listen', 'envoyAdmin', 'port']);
  num('ADMIN_PORT', ['listen', 'admin', 'port']);
  str('SIDECAR_GRPC', ['listen', 'sidecarGrpc']);
  str('UPSTREAM_URL', ['upstream', 'baseUrl']);
  str('UPSTREAM_API_KEY_FILE', ['upstream', 'apiKeyFile']);
  str('ACCOUNT_SERVICE_URL', ['accountService', 'url']);
  str('PAYMENTS_URL', ['accountService', 'paymentsUrl']);
  const billing = env.BILLING_ENABLED;
  if (billing === 'true' || billing === '1') setPath(raw, ['accountService', 'billingEnabled'], true);
  else if (billing === 'false' || billing === '0') setPath(raw, ['accountService', 'billingEnabled'], false);
  else if (billing !== undefined && billing !== '') problems.push('BILLING_ENABLED: must be true or false');
  str('LOG_LEVEL', ['log', 'level']);
  // Each of several sidecar processes on one host keeps its own journal (a shared file loses lines).
  str('SETTLEMENT_JOURNAL', ['billing', 'journalPath']);
  str('IDENTITY_JWKS_FILE', ['identity', 'jwksFile']);
  str('IDENTITY_JWKS_URL', ['identity', 'jwksUrl']);
  // Switches to Redis (REDIS_URL) or a Redis Cluster (REDIS_CLUSTER_NODES: comma-separated
  // seed URLs; wins); the file's other store settings (TLS, user, password source) stay.
  const switchStore = (kind: string, field: string, value: unknown, drop: readonly string[]) => {
    setPath(raw, ['store', 'kind'], kind);
    setPath(raw, ['store', field], value);
    for (const f of drop) delete (raw.store as Plain)[f];
  };
  if (env.REDIS_URL) switchStore('redis', 'url', env.REDIS_URL, ['nodes', 'replicaAcks']);
  if (env.REDIS_CLUSTER_NODES) {
    const nodes = env.REDIS_CLUSTER_NODES.split(',').map((u) => u.trim()).filter((u) => u !== '');
    switchStore('redis-cluster', 'nodes', nodes, ['url']);
  }
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object') {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

/**
 * Loads the configuration once: embedded defaults, then the file named by
 * `path` (or GATEWAY_CONFIG), then environment overrides. Throws ConfigError
 * listing every problem found.
 */
export function loadConfig(opts: { path?: string | undefined; env?: Env } = {}): Config {
  const env = opts.env ?? process.env;
  const path = opts.path ?? env.GATEWAY_CONFIG;
  const problems: string[] = [];
  let fromFile: Plain = {};
  if (path) {
    try {
      const parsed: unknown = parseYaml(readFileSync(path, 'utf8'));
      if (parsed === null || parsed === undefined) fromFile = {};
      else if (isObject(parsed)) fromFile = parsed;
      else problems.push(`${path}: the top level must be a mapping`);
    } catch (err) {
      problems.push(`${path}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  const brand = typeof fromFile.brand === 'string' ? fromFile.brand : 'svc';
  const raw = mergeConfig(defaultConfig(brand), fromFile);
  applyEnv(raw, env, problems);
  return parseConfig(raw, problems);
}

/** Validates an already-assembled raw object (used by tests and the loader). */
export function parseConfig(raw: unknown, earlier: readonly string[] = []): Config {
  const result = ConfigSchema.safeParse(raw);
  const problems = [...earlier, ...modelRuleProblems(raw)];
  if (!result.success) {
    for (const issue of result.error.issues) {
      const where = issue.path.length ? issue.path.join('.') : '(root)';
      problems.push(`${where}: ${issue.message}`);
    }
  }
  if (problems.length || !result.success) throw new ConfigError(problems);
  return deepFreeze(result.data);
}

/**
 * A secret from a file (wins) or an environment variable, never from a
 * command line; undefined if neither is set. `what` names the file setting
 * in the error when the file cannot be read.
 */
export function readSecret(src: { file: string | null; env: string | null }, env: Env, what: string): string | undefined {
  if (src.file) {
    let text: string;
    try {
      text = readFileSync(src.file, 'utf8');
    } catch (err) {
      throw new Error(`${what}: cannot read ${src.file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    }
    return text.trim() || undefined;
  }
  if (src.env) return env[src.env]?.trim() || undefined;
  return undefined;
}

/**
 * The provider key: file wins over environment variable; undefined if neither
 * is set, or the file cannot be read (the start-up provider check warns about
 * that, naming the file; a provider key is not worth keeping the gateway down).
 */
export function readUpstreamKey(cfg: Config, env: Env = process.env): string | undefined {
  try {
    return readSecret({ file: cfg.upstream.apiKeyFile, env: cfg.upstream.apiKeyEnv }, env, 'upstream.apiKeyFile');
  } catch {
    return undefined;
  }
}

/** For process entry points: the configuration, or every problem on stderr and exit code 2. */
export function loadConfigOrExit(): Config {
  try {
    return loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
}
