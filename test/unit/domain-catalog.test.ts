/** The alias catalogue: list body, resolution, valid aliases per kind. */
import { describe, expect, it } from 'vitest';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { resolveModelField } from '../../sidecar/src/domain/model-field.js';

const cfg = parseConfig(defaultConfig('svc'));
const catalog = new Catalog(cfg.models, cfg.brand);

interface Listed {
  id: string;
  object: string;
  created: number;
  owned_by: string;
  [k: string]: unknown;
}
// Built in each test (not only at import), so what the constructor writes is checked per test.
const listed = (c: Catalog = new Catalog(cfg.models, cfg.brand)) => (JSON.parse(c.modelListJson()) as { object: string; data: Listed[] });

describe('model list', () => {
  it('holds 8 entries: the four floating aliases, then their pinned variants', () => {
    const body = listed();
    expect(body.object).toBe('list');
    expect(body.data.map((e) => e.id)).toEqual([
      'svc-quick', 'svc-core', 'svc-deep', 'svc-embed',
      'svc-quick-2026-08', 'svc-core-2026-08', 'svc-deep-2026-08', 'svc-embed-2026-08',
    ]);
    for (const e of body.data) {
      expect(e.object).toBe('model');
      expect(e.created).toBe(1_785_542_400);
      expect(e.owned_by).toBe('svc');
    }
  });

  it('floating entries carry svc_kind, svc_floating true and svc_pinned_variant', () => {
    const deep = listed().data.find((e) => e.id === 'svc-deep');
    expect(deep).toEqual({
      id: 'svc-deep', object: 'model', created: 1_785_542_400, owned_by: 'svc',
      svc_kind: 'chat', svc_floating: true, svc_pinned_variant: 'svc-deep-2026-08',
    });
    expect(listed().data.find((e) => e.id === 'svc-embed')?.svc_kind).toBe('embedding');
  });

  it('pinned entries carry svc_floating false and svc_pinned_date YYYY-MM', () => {
    const pinned = listed().data.filter((e) => e.svc_floating === false);
    expect(pinned).toHaveLength(4);
    for (const e of pinned) {
      expect(e.svc_pinned_date).toBe('2026-08');
      expect(e).not.toHaveProperty('svc_pinned_variant');
      expect(e.svc_kind).toMatch(/^(chat|embedding)$/);
    }
  });

  it('the brand prefixes the extra fields', () => {
    const acme = parseConfig(defaultConfig('acme'));
    const e = listed(new Catalog(acme.models, acme.brand)).data[0];
    expect(e).toMatchObject({ id: 'acme-quick', acme_kind: 'chat', acme_floating: true, acme_pinned_variant: 'acme-quick-2026-08' });
    expect(Object.keys(e ?? {}).some((k) => k.startsWith('svc_'))).toBe(false);
  });

  it('never mentions an internal model name', () => {
    const json = catalog.modelListJson();
    expect(catalog.internalModels.size).toBe(4);
    for (const internal of catalog.internalModels) expect(json).not.toContain(internal);
    for (const e of catalog.entries) expect(catalog.modelJson(e.id)).not.toContain('sim-');
  });

  it('modelJson returns one entry, or undefined for an unknown id', () => {
    expect(JSON.parse(catalog.modelJson('svc-core-2026-08') ?? 'null')).toMatchObject({ id: 'svc-core-2026-08', svc_pinned_date: '2026-08' });
    expect(catalog.modelJson('svc-nope')).toBeUndefined();
    expect(catalog.modelJson('sim-core-1')).toBeUndefined();
  });
});

describe('resolve', () => {
  it('resolves a floating alias', () => {
    expect(catalog.resolve('svc-deep')).toEqual({
      alias: 'svc-deep', kind: 'chat', floating: true, internalModel: 'sim-deep-r1', maxTokensFloor: 8000, maxOutputTokens: 32768,
    });
  });

  it('resolves a pinned alias to its pinned model', () => {
    const models = cfg.models.map((m) => (m.alias === 'svc-core' ? { ...m, model: 'sim-core-2', pinnedModel: 'sim-core-1' } : m));
    const c = new Catalog(models, 'svc');
    expect(c.resolve('svc-core')?.internalModel).toBe('sim-core-2');
    expect(c.resolve('svc-core-2026-08')).toEqual({
      alias: 'svc-core-2026-08', kind: 'chat', floating: false, internalModel: 'sim-core-1', maxTokensFloor: null, maxOutputTokens: 4096,
    });
  });

  it('does not resolve internal names or unknown aliases', () => {
    expect(catalog.resolve('sim-quick-1')).toBeUndefined();
    expect(catalog.resolve('svc-quick-2026-09')).toBeUndefined();
    expect(catalog.resolve('')).toBeUndefined();
  });
});

describe('validAliases', () => {
  it('lists the chat and the embedding aliases separately', () => {
    expect([...catalog.validAliases('chat')].sort()).toEqual(
      ['svc-core', 'svc-core-2026-08', 'svc-deep', 'svc-deep-2026-08', 'svc-quick', 'svc-quick-2026-08'],
    );
    expect([...catalog.validAliases('embedding')].sort()).toEqual(['svc-embed', 'svc-embed-2026-08']);
  });

  // BUG (minor): the doc comment promises "floating first then pinned", but
  // aliases are interleaved per family (svc-quick, svc-quick-2026-08, svc-core, ...).
  it('orders floating aliases first, then pinned', () => {
    expect(catalog.validAliases('chat')).toEqual(
      ['svc-quick', 'svc-core', 'svc-deep', 'svc-quick-2026-08', 'svc-core-2026-08', 'svc-deep-2026-08'],
    );
  });
});

describe('the model field', () => {
  const fresh = () => new Catalog(cfg.models, cfg.brand);
  const refusal = (model: unknown, kind: 'chat' | 'embedding') => {
    const r = resolveModelField(fresh(), model, kind);
    if (r.ok) throw new Error('expected a refusal');
    return { status: r.error.entry.status, code: r.error.entry.code, message: r.error.message, param: r.error.param };
  };

  it('missing, empty or not a string: 400 naming the field', () => {
    for (const model of [undefined, '', 7, null]) {
      expect(refusal(model, 'chat')).toEqual({ status: 400, code: 'invalid_request', message: 'The field is required and must be a string.', param: 'model' });
    }
  });

  it('unknown (or an internal name): the valid aliases of this endpoint, floating first, then pinned', () => {
    expect(refusal('sim-core-1', 'chat').message).toBe(
      'Unknown model. Valid values: svc-quick, svc-core, svc-deep, svc-quick-2026-08, svc-core-2026-08, svc-deep-2026-08.',
    );
    expect(refusal('nope', 'embedding').message).toBe('Unknown model. Valid values: svc-embed, svc-embed-2026-08.');
  });

  it('the wrong endpoint for the model: which kind it is, where to send it, what this endpoint takes', () => {
    expect(refusal('svc-embed', 'chat')).toMatchObject({
      status: 400,
      message: 'This is an embedding model; send it to /embeddings. Models for /chat/completions: svc-quick, svc-core, svc-deep, svc-quick-2026-08, svc-core-2026-08, svc-deep-2026-08.',
    });
    expect(refusal('svc-core-2026-08', 'embedding').message).toBe(
      'This is a chat model; send it to /chat/completions. Models for /embeddings: svc-embed, svc-embed-2026-08.',
    );
  });

  it('a valid alias resolves to its kind, floating or pinned, and internal model', () => {
    const r = resolveModelField(fresh(), 'svc-core-2026-08', 'chat');
    expect(r.ok && r.resolved).toMatchObject({ alias: 'svc-core-2026-08', kind: 'chat', floating: false, internalModel: 'sim-core-1' });
    expect(fresh().internalModels.has('sim-embed-1')).toBe(true);
  });
});
