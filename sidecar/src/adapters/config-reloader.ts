import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { ConfigError, loadConfig } from '../config/load.js';
import { describeReload, internalNamesInFile, redactModels, reloadablePart, reloadProblems, settingsHash, withReloadable, type Reloadable } from '../config/reload.js';
import type { Config } from '../config/schema.js';
import type { LiveConfig, LiveSnapshot } from '../domain/live-config.js';
import { parseRetained, type Broadcast } from '../store/key-events.js';

/**
 * Configuration reloads without a restart (SIGHUP, the operator API, or a
 * reload published by another instance). A new configuration is validated
 * first and refused as a whole when anything is wrong (nothing changes); when
 * it passes, it replaces the live snapshot in one step (new requests use it,
 * requests in flight finish on what they were admitted with), an audit line
 * is logged, and the reloadable part is published so every instance applies
 * the same change. Messages name settings and aliases, never internal models.
 */

export const CONFIG_TOPIC = 'config:reloaded';

export type ReloadSource = 'sighup' | 'api' | 'peer';

export type ReloadResult =
  | { readonly ok: true; readonly generation: number; readonly moved: readonly string[]; readonly changed: boolean }
  | { readonly ok: false; readonly problems: readonly string[] };

export interface ReloaderDeps {
  readonly live: LiveConfig;
  readonly log: Logger;
  readonly broadcast: Broadcast;
  /** Reads the configuration again (file + environment), as at start. */
  readonly load?: () => Config;
  /** The configuration file (GATEWAY_CONFIG), to keep its model names out of a refusal. */
  readonly configPath?: string | undefined;
  /** Applies a validated snapshot to what is not read per request (billing, log level). */
  readonly applied: (snap: LiveSnapshot) => void;
  /** Every reload attempt: applied or not, the live generation and the live settings' hash. */
  readonly observe?: (applied: boolean, generation: number, settingsHash: string) => void;
}

interface PeerMessage {
  readonly origin: string;
  readonly part: Reloadable;
}

/** Internal model names of a configuration (so refusals never show them). */
function namesIn(cfg: Config | null): string[] {
  return cfg ? cfg.models.flatMap((f) => [f.model, f.pinnedModel]).concat(Object.keys(cfg.billing.prices)) : [];
}

export class ConfigReloader {
  private readonly instance = randomUUID();
  private readonly load: () => Config;
  /**
   * The number of the newest reload publication this instance has seen (heard,
   * read back, or its own); -1 until the first catch-up. What was published
   * before this instance started is not applied: it started from its own file.
   */
  private seen = -1;

  constructor(private readonly deps: ReloaderDeps) {
    this.load = deps.load ?? (() => loadConfig());
    deps.broadcast.subscribe(CONFIG_TOPIC, (raw) => {
      // null: (re)subscribed, publications may have been missed meanwhile.
      if (raw === null) void this.catchUp();
      else this.heard(raw);
    });
    void this.catchUp();
  }

  /**
   * Applies the latest reload publication if this instance has not seen it (a
   * message missed while its subscription was down, or moving between Cluster
   * nodes). Runs on every (re)subscription and periodically; never throws.
   */
  async catchUp(): Promise<void> {
    let latest;
    try {
      latest = await this.deps.broadcast.latest(CONFIG_TOPIC);
    } catch {
      return; // the store is away: the next catch-up looks again
    }
    if (this.seen < 0) {
      this.seen = Math.max(this.seen, latest?.seq ?? 0);
      return;
    }
    if (!latest || latest.seq <= this.seen) return;
    this.seen = latest.seq;
    this.deps.log.info({ event: 'config_reload' }, 'a configuration reload published while this instance was not listening: applying it now');
    this.fromPeer(latest.message);
  }

  private heard(raw: string): void {
    const m = parseRetained(raw);
    if (!m || m.seq <= this.seen) return; // not a reload publication, or one already applied
    this.seen = m.seq;
    this.fromPeer(m.message);
  }

  /** Reads the configuration file again and applies it here and on every instance. */
  async reload(source: Exclude<ReloadSource, 'peer'>): Promise<ReloadResult> {
    let next: Config;
    try {
      next = this.load();
    } catch (err) {
      const problems = err instanceof ConfigError ? [...err.problems] : [(err as Error).message];
      return this.refused(source, problems, null, internalNamesInFile(this.deps.configPath));
    }
    const result = this.apply(source, next);
    if (result.ok && result.changed) {
      const msg: PeerMessage = { origin: this.instance, part: reloadablePart(next) };
      await this.deps.broadcast.publishRetained(CONFIG_TOPIC, JSON.stringify(msg)).then(
        (seq) => {
          this.seen = Math.max(this.seen, seq);
        },
        () => {
          this.deps.log.warn({ event: 'config_reload' }, 'reload applied here but not published: other instances keep their configuration until reloaded');
        },
      );
    }
    return result;
  }

  private fromPeer(message: string): void {
    let msg: PeerMessage;
    try {
      msg = JSON.parse(message) as PeerMessage;
    } catch {
      return;
    }
    if (msg.origin === this.instance) return;
    let next: Config;
    try {
      next = withReloadable(this.deps.live.current.config, msg.part);
    } catch (err) {
      this.refused('peer', err instanceof ConfigError ? [...err.problems] : [(err as Error).message]);
      return;
    }
    this.apply('peer', next);
  }

  private apply(source: ReloadSource, next: Config): ReloadResult {
    const current = this.deps.live.current.config;
    const problems = reloadProblems(current, next);
    if (problems.length) return this.refused(source, problems, next);
    const change = describeReload(current, next);
    const hash = settingsHash(next);
    const unchanged = hash === settingsHash(current);
    if (unchanged) {
      this.deps.log.info({ event: 'config_reload', source, result: 'unchanged', generation: this.deps.live.current.generation }, 'configuration reloaded: nothing changed');
      return { ok: true, generation: this.deps.live.current.generation, moved: [], changed: false };
    }
    const snap = this.deps.live.apply(next);
    this.deps.applied(snap);
    this.deps.observe?.(true, snap.generation, hash);
    this.deps.log.info(
      {
        event: 'config_reload',
        audit: true,
        source,
        result: 'applied',
        generation: snap.generation,
        settings_hash: hash,
        aliases_moved: change.moved,
        aliases_added: change.added,
        aliases_removed: change.removed,
        prices_changed: change.pricesChanged,
        billing_changed: change.billingChanged,
      },
      'configuration reloaded',
    );
    return { ok: true, generation: snap.generation, moved: change.moved, changed: true };
  }

  private refused(source: ReloadSource, problems: readonly string[], next: Config | null = null, more: readonly string[] = []): ReloadResult {
    const names = [...namesIn(this.deps.live.current.config), ...namesIn(next), ...more];
    const clean = problems.map((p) => redactModels(p, names));
    this.deps.observe?.(false, this.deps.live.current.generation, settingsHash(this.deps.live.current.config));
    this.deps.log.warn({ event: 'config_reload', audit: true, source, result: 'rejected', problems: clean }, 'configuration reload refused; nothing changed');
    return { ok: false, problems: clean };
  }
}
