import type { ModelFamily } from '../config/schema.js';

export type ModelKind = 'chat' | 'embedding';

/** What an alias resolves to; the internal name never leaves the gateway. */
export interface ResolvedAlias {
  readonly alias: string;
  readonly kind: ModelKind;
  readonly floating: boolean;
  readonly internalModel: string;
  readonly maxTokensFloor: number | null;
  /** Output cap sent when the caller names none. */
  readonly maxOutputTokens: number;
}

export interface ModelListEntry {
  id: string;
  object: 'model';
  created: number;
  owned_by: string;
  [field: string]: unknown;
}

/**
 * The alias catalogue: floating and pinned aliases, their kind, and the
 * internal model behind each. Built once from the frozen config.
 */
export class Catalog {
  private readonly byAlias = new Map<string, ResolvedAlias>();
  private readonly validByKind: Record<ModelKind, string[]> = { chat: [], embedding: [] };
  private readonly pinnedByKind: Record<ModelKind, string[]> = { chat: [], embedding: [] };
  readonly internalModels: ReadonlySet<string>;
  private readonly listBody: string;

  constructor(families: readonly ModelFamily[], brand: string, created = 1_785_542_400 /* 2026-08-01 */) {
    const entries: ModelListEntry[] = [];
    const pinnedEntries: ModelListEntry[] = [];
    for (const f of families) {
      const shared = { kind: f.kind, maxTokensFloor: f.maxTokensFloor, maxOutputTokens: f.maxOutputTokens };
      this.add({ alias: f.alias, floating: true, internalModel: f.model, ...shared });
      this.add({ alias: f.pinned, floating: false, internalModel: f.pinnedModel, ...shared });
      entries.push({
        id: f.alias, object: 'model', created, owned_by: f.owner,
        [`${brand}_kind`]: f.kind, [`${brand}_floating`]: true, [`${brand}_pinned_variant`]: f.pinned,
      });
      pinnedEntries.push({
        id: f.pinned, object: 'model', created, owned_by: f.owner,
        [`${brand}_kind`]: f.kind, [`${brand}_floating`]: false, [`${brand}_pinned_date`]: f.pinned.slice(-7),
      });
    }
    for (const kind of ['chat', 'embedding'] as const) this.validByKind[kind].push(...this.pinnedByKind[kind]);
    this.internalModels = new Set(families.flatMap((f) => [f.model, f.pinnedModel]));
    const all = [...entries, ...pinnedEntries];
    this.entries = all;
    this.listBody = JSON.stringify({ object: 'list', data: all });
  }

  readonly entries: readonly ModelListEntry[];

  private add(r: ResolvedAlias): void {
    this.byAlias.set(r.alias, Object.freeze(r));
    (r.floating ? this.validByKind : this.pinnedByKind)[r.kind].push(r.alias);
  }

  /** Every alias of the catalogue, floating and pinned. */
  all(): IterableIterator<ResolvedAlias> {
    return this.byAlias.values();
  }

  resolve(alias: string): ResolvedAlias | undefined {
    return this.byAlias.get(alias);
  }

  /** Aliases accepted on an endpoint of this kind, floating first then pinned. */
  validAliases(kind: ModelKind): readonly string[] {
    return this.validByKind[kind];
  }

  /** The serialised `GET /models` body (static for the process lifetime). */
  modelListJson(): string {
    return this.listBody;
  }

  modelJson(alias: string): string | undefined {
    const e = this.entries.find((x) => x.id === alias);
    return e ? JSON.stringify(e) : undefined;
  }
}
