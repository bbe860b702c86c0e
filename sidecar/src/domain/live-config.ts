import type { Config } from '../config/schema.js';
import type { AdmissionPolicy } from './admission.js';
import { Catalog } from './catalog.js';

/** One generation of the reloadable settings, built once and never changed. */
export interface LiveSnapshot {
  /** 0: the configuration read at start; +1 per applied reload. */
  readonly generation: number;
  readonly config: Config;
  readonly catalog: Catalog;
  readonly admission: AdmissionPolicy;
}

/**
 * The settings new requests are served with. A reload replaces the whole
 * snapshot in one assignment, so a request reads either the old or the new
 * one, never a mix; a request already admitted keeps what it resolved then
 * (its alias assignment and price travel with it).
 */
export class LiveConfig {
  private snap: LiveSnapshot;

  constructor(cfg: Config) {
    this.snap = LiveConfig.build(cfg, 0);
  }

  get current(): LiveSnapshot {
    return this.snap;
  }

  apply(cfg: Config): LiveSnapshot {
    this.snap = LiveConfig.build(cfg, this.snap.generation + 1);
    return this.snap;
  }

  private static build(cfg: Config, generation: number): LiveSnapshot {
    const catalog = new Catalog(cfg.models, cfg.brand);
    return Object.freeze({
      generation,
      config: cfg,
      catalog,
      admission: Object.freeze({
        catalog,
        defaultTemperature: cfg.defaults.temperature,
        maxEmbeddingInputs: cfg.limits.maxEmbeddingInputs,
        maxRequestBytes: cfg.limits.maxRequestBytes,
      }),
    });
  }
}
