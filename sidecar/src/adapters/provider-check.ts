import { readFileSync } from 'node:fs';
import type { Config } from '../config/schema.js';
import { FetchError, fetchJson, nodeTlsOptions } from './outbound-tls.js';

/**
 * A start-up look at the configured provider: is its key there, does it
 * answer, does it serve the internal models the configuration names. Every
 * finding is a warning for the operator; none stops the gateway (a provider
 * that is down at boot must not keep the gateway down).
 */
export interface ProviderFinding {
  readonly kind: 'key_missing' | 'key_file_unreadable' | 'unreachable' | 'unauthorized' | 'bad_status' | 'bad_body' | 'models_missing';
  /** For the operator's terminal: may name internal models (the operator's own configuration). */
  readonly message: string;
  /** For log lines: aliases only, never an internal model name or a key. */
  readonly logMessage: string;
}

export interface ProviderCheckOptions {
  readonly env?: Readonly<Record<string, string | undefined>>;
  readonly timeoutMs?: number;
  /** False for the bundled simulator, which needs no key. */
  readonly keyRequired?: boolean;
}

const finding = (kind: ProviderFinding['kind'], message: string, logMessage = message): ProviderFinding => ({ kind, message, logMessage });

function providerKey(cfg: Config, env: Readonly<Record<string, string | undefined>>, out: ProviderFinding[], keyRequired: boolean): string | undefined {
  const { apiKeyFile, apiKeyEnv } = cfg.upstream;
  if (apiKeyFile) {
    let text: string;
    try {
      text = readFileSync(apiKeyFile, 'utf8');
    } catch (err) {
      out.push(finding('key_file_unreadable', `the provider key file ${apiKeyFile} (upstream.apiKeyFile) cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`));
      return undefined;
    }
    if (!text.trim()) {
      if (keyRequired) out.push(finding('key_missing', `the provider key file ${apiKeyFile} (upstream.apiKeyFile) is empty`));
      return undefined;
    }
    return text.trim();
  }
  const value = apiKeyEnv ? env[apiKeyEnv]?.trim() : undefined;
  if (!value && keyRequired) {
    out.push(
      finding(
        'key_missing',
        apiKeyEnv
          ? `the provider key variable ${apiKeyEnv} (upstream.apiKeyEnv) is not set or empty: requests reach the provider without a key`
          : 'no provider key is configured (upstream.apiKeyEnv and upstream.apiKeyFile are both null): requests reach the provider without a key',
      ),
    );
  }
  return value || undefined;
}

/** Runs the checks; resolves with the findings (empty: all good). Never throws. */
export async function checkProvider(cfg: Config, opts: ProviderCheckOptions = {}): Promise<ProviderFinding[]> {
  const out: ProviderFinding[] = [];
  const key = providerKey(cfg, opts.env ?? process.env, out, opts.keyRequired ?? true);
  const url = `${cfg.upstream.baseUrl.replace(/\/$/, '')}/models`;
  const notAList = () => finding('bad_body', `the provider's GET ${url} is not an OpenAI model list ({"data":[{"id":…}]}); its models could not be checked`);
  let body: unknown;
  try {
    // An https provider is verified as Envoy verifies it (upstream.tls), so a TLS problem shows here too.
    const tls = url.startsWith('https:') ? nodeTlsOptions(cfg.upstream.tls, new URL(url).hostname, 'upstream.tls') : null;
    body = await fetchJson(url, { tls, timeoutMs: opts.timeoutMs ?? 5000, maxBytes: 8 * 1024 * 1024, headers: key ? { authorization: `Bearer ${key}` } : {} });
  } catch (err) {
    const status = err instanceof FetchError ? err.status : null;
    const why = (err as Error).message;
    if (status === 401 || status === 403) {
      out.push(finding('unauthorized', `the provider answered ${status} to GET ${url}: the provider key is missing or wrong`));
    } else if (status !== null) {
      out.push(finding('bad_status', `the provider answered HTTP ${status} to GET ${url}; its model list could not be checked`));
    } else if (why === 'not JSON') {
      out.push(notAList());
    } else {
      out.push(finding('unreachable', `the provider did not answer GET ${url} (${why}); requests get 502 until it does`));
    }
    return out;
  }
  const data = (body as { data?: Array<{ id?: unknown }> } | null)?.data;
  if (!Array.isArray(data)) {
    out.push(notAList());
    return out;
  }
  const served = new Set(data.map((m) => m?.id).filter((id): id is string => typeof id === 'string'));
  const missing: Array<{ alias: string; model: string }> = [];
  for (const m of cfg.models) {
    if (!served.has(m.model)) missing.push({ alias: m.alias, model: m.model });
    if (!served.has(m.pinnedModel)) missing.push({ alias: m.pinned, model: m.pinnedModel });
  }
  if (missing.length) {
    const names = [...new Set(missing.map((m) => m.model))];
    const aliases = missing.map((m) => m.alias);
    out.push(
      finding(
        'models_missing',
        `the provider does not list ${names.length === 1 ? 'the configured internal model' : 'these configured internal models'} ${names.join(', ')} (used by ${aliases.join(', ')}): requests for ${aliases.length === 1 ? 'that alias' : 'those aliases'} will fail with 502`,
        `the provider does not list the internal model of ${aliases.join(', ')}: requests for ${aliases.length === 1 ? 'that alias' : 'those aliases'} will fail with 502`,
      ),
    );
  }
  return out;
}
