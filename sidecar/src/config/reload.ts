import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import type { Config } from './schema.js';
import { mergeConfig, parseConfig } from './load.js';

/**
 * What a running gateway may change without a restart, and the checks a new
 * configuration must pass before it replaces the running one.
 *
 * Reloadable: the model families (moving a floating alias to another
 * internal model, adding a family), defaults, limits the sidecar alone
 * enforces, billing (prices, credit check, rate limits, holds) and the log
 * level. Everything else is either in Envoy's rendered config (listeners,
 * provider, account service, the body buffer limit) or fixed for the
 * process's life (brand, store, identity provider, key cache, currency, the
 * journal's path, the hold lease, the shutdown drain): changing it needs a restart, and a reload that changes it
 * is refused as a whole.
 */

const stable = (v: unknown): string => JSON.stringify(v, (_k, x: unknown) => (x && typeof x === 'object' && !Array.isArray(x) ? Object.fromEntries(Object.entries(x).sort(([a], [b]) => a.localeCompare(b))) : x));

export interface Reloadable {
  readonly models: Config['models'];
  readonly defaults: Config['defaults'];
  readonly limits: Pick<Config['limits'], 'maxRequestBytes' | 'maxEmbeddingInputs'>;
  readonly billing: Omit<Config['billing'], 'currency' | 'journalPath'>;
  readonly log: Config['log'];
}

/** The reloadable part of a configuration (what is published to the other instances). */
export function reloadablePart(cfg: Config): Reloadable {
  const { currency: _c, journalPath: _j, ...billing } = cfg.billing;
  return {
    models: cfg.models,
    defaults: cfg.defaults,
    limits: { maxRequestBytes: cfg.limits.maxRequestBytes, maxEmbeddingInputs: cfg.limits.maxEmbeddingInputs },
    billing,
    log: cfg.log,
  };
}

/** A short fingerprint of the reloadable settings: equal on instances that serve alike. */
export function settingsHash(cfg: Config): string {
  return createHash('sha256').update(stable(reloadablePart(cfg))).digest('hex').slice(0, 16);
}

/** The running configuration with another instance's reloadable part applied (validated; throws ConfigError). */
export function withReloadable(current: Config, part: Reloadable): Config {
  const base = JSON.parse(JSON.stringify(current)) as Record<string, unknown>;
  // Arrays replace; objects merge key by key (billing.prices is replaced as a whole).
  const merged = mergeConfig(base, { ...part, billing: { ...part.billing } });
  (merged.billing as Record<string, unknown>).prices = part.billing.prices;
  return parseConfig(merged);
}


/** Top-level (and limits/billing) paths whose value differs but which only a restart can change. */
function restartOnlyChanges(current: Config, next: Config): string[] {
  const out: string[] = [];
  const reloadableTop = new Set(['models', 'defaults', 'limits', 'billing', 'log']);
  for (const key of Object.keys({ ...current, ...next }) as (keyof Config)[]) {
    if (!reloadableTop.has(key) && stable(current[key]) !== stable(next[key])) out.push(key);
  }
  if (current.limits.maxResponseBytes !== next.limits.maxResponseBytes) out.push('limits.maxResponseBytes');
  if (current.billing.currency !== next.billing.currency) out.push('billing.currency');
  if (current.billing.journalPath !== next.billing.journalPath) out.push('billing.journalPath');
  // The lease renewal runs on a timer set from it at start.
  if (current.billing.holdLeaseSeconds !== next.billing.holdLeaseSeconds) out.push('billing.holdLeaseSeconds');
  return out;
}

/**
 * Problems that refuse a reload of an otherwise valid configuration: a change
 * only a restart can make, or a pinned alias moved or removed (a pinned alias
 * names one internal model forever). Messages name aliases and settings, never
 * an internal model.
 */
export function reloadProblems(current: Config, next: Config): string[] {
  const problems = restartOnlyChanges(current, next).map((k) => `${k}: changing it needs a restart (a reload changes models, prices, limits, defaults, billing and the log level only)`);
  const nextPinned = new Map(next.models.map((f) => [f.pinned, f.pinnedModel]));
  for (const f of current.models) {
    const now = nextPinned.get(f.pinned);
    if (now === undefined) problems.push(`models: the pinned alias ${f.pinned} cannot be removed by a reload`);
    else if (now !== f.pinnedModel) problems.push(`models: the pinned alias ${f.pinned} cannot be moved to another model`);
  }
  return problems;
}

/** For the audit line: what a reload changes, by alias (internal models are never named). */
export function describeReload(current: Config, next: Config): { moved: string[]; added: string[]; removed: string[]; pricesChanged: number; billingChanged: boolean } {
  const before = new Map(current.models.map((f) => [f.alias, f]));
  const after = new Map(next.models.map((f) => [f.alias, f]));
  const moved = [...after.values()].filter((f) => before.has(f.alias) && before.get(f.alias)?.model !== f.model).map((f) => f.alias);
  const added = [...after.keys()].filter((a) => !before.has(a));
  const removed = [...before.keys()].filter((a) => !after.has(a));
  const models = new Set([...Object.keys(current.billing.prices), ...Object.keys(next.billing.prices)]);
  const pricesChanged = [...models].filter((m) => stable(current.billing.prices[m]) !== stable(next.billing.prices[m])).length;
  const { prices: _a, ...b1 } = current.billing;
  const { prices: _b, ...b2 } = next.billing;
  return { moved, added, removed, pricesChanged, billingChanged: stable(b1) !== stable(b2) };
}

/** Replaces each of these internal model names in a message (for log lines and answers). */
export function redactModels(text: string, names: Iterable<string>): string {
  let out = text;
  for (const n of [...new Set(names)].filter(Boolean).sort((a, b) => b.length - a.length)) out = out.split(n).join('<internal model>');
  return out;
}

/** Internal model names a configuration file mentions, read leniently (to redact them from a refusal of that file). */
export function internalNamesInFile(path: string | undefined): string[] {
  if (!path) return [];
  try {
    const raw = parseYaml(readFileSync(path, 'utf8')) as { models?: unknown; billing?: { prices?: unknown } } | null;
    const out: string[] = [];
    if (Array.isArray(raw?.models)) {
      for (const m of raw.models as Record<string, unknown>[]) for (const f of ['model', 'pinnedModel']) if (typeof m?.[f] === 'string') out.push(m[f] as string);
    }
    const prices = raw?.billing?.prices;
    if (prices && typeof prices === 'object') out.push(...Object.keys(prices));
    return out;
  } catch {
    return [];
  }
}
