import { describe, expect, it } from 'vitest';
import { mergeConfig, parseConfig } from '../../sidecar/src/config/load.js';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { describeReload, redactModels, reloadablePart, reloadProblems, withReloadable } from '../../sidecar/src/config/reload.js';
import { LiveConfig } from '../../sidecar/src/domain/live-config.js';

const base = parseConfig(defaultConfig('svc'));
const edit = (f: (raw: any) => void) => {
  const raw = JSON.parse(JSON.stringify(base));
  f(raw);
  return parseConfig(raw);
};

describe('configuration reload rules', () => {
  it('a floating alias move, a price, a limit and the log level are reloadable', () => {
    const next = edit((c) => {
      c.models[0].model = 'sim-core-1';
      c.billing.prices['sim-core-1'].inputPerMillion = 1;
      c.billing.creditCheck = true;
      c.limits.maxEmbeddingInputs = 10;
      c.log.level = 'debug';
    });
    expect(reloadProblems(base, next)).toEqual([]);
    expect(describeReload(base, next)).toEqual({ moved: ['svc-quick'], added: [], removed: [], pricesChanged: 1, billingChanged: true });
  });

  it('refuses pinned moves and removals and every restart-only change, naming no internal model', () => {
    const next = edit((c) => {
      c.models[0].pinnedModel = 'sim-core-1';
      c.models = c.models.filter((f: any) => f.alias !== 'svc-embed');
      c.upstream.baseUrl = 'http://10.0.0.1/v1';
      c.listen.gateway.port = 1;
      c.limits.maxResponseBytes = 1024;
      c.billing.currency = 'EUR';
      c.store = { kind: 'redis', url: 'redis://x' };
    });
    const problems = reloadProblems(base, next);
    expect(problems).toEqual([
      expect.stringMatching(/^listen: changing it needs a restart/),
      expect.stringMatching(/^upstream: /),
      expect.stringMatching(/^store: /),
      expect.stringMatching(/^limits\.maxResponseBytes: /),
      expect.stringMatching(/^billing\.currency: /),
      'models: the pinned alias svc-quick-2026-08 cannot be moved to another model',
      'models: the pinned alias svc-embed-2026-08 cannot be removed by a reload',
    ]);
    expect(problems.join(' ')).not.toMatch(/sim-/);
  });

  it("another instance's reloadable part applies over this instance's own listeners and store", () => {
    const mine = parseConfig(mergeConfig(defaultConfig('svc'), { listen: { gateway: { host: '127.0.0.1', port: 9999 } }, store: { kind: 'redis', url: 'redis://a' } }));
    const theirs = edit((c) => {
      c.models[1].model = 'sim-deep-r1';
      delete c.billing.prices['sim-embed-1'];
      c.models = c.models.filter((f: any) => f.alias !== 'svc-embed');
      c.models.push({ ...c.models[0], alias: 'svc-embed', pinned: 'svc-embed-2026-08', kind: 'embedding', model: 'sim-quick-1', pinnedModel: 'sim-quick-1', maxTokensFloor: null });
    });
    const merged = withReloadable(mine, reloadablePart(theirs));
    expect(merged.listen.gateway.port).toBe(9999);
    expect(merged.store).toMatchObject({ kind: 'redis', url: 'redis://a' });
    expect(merged.models[1]?.model).toBe('sim-deep-r1');
    expect(Object.keys(merged.billing.prices)).not.toContain('sim-embed-1'); // prices replace as a whole
  });

  it('redacts internal model names, longest first', () => {
    expect(redactModels('sim-core-1 and sim-core-10', ['sim-core-1', 'sim-core-10'])).toBe('<internal model> and <internal model>');
  });

  it('a snapshot is swapped whole; an older snapshot held by a request keeps its catalogue', () => {
    const live = new LiveConfig(base);
    const old = live.current;
    const next = live.apply(edit((c) => void (c.models[0].model = 'sim-core-1')));
    expect(next.generation).toBe(1);
    expect(old.catalog.resolve('svc-quick')?.internalModel).toBe('sim-quick-1');
    expect(live.current.catalog.resolve('svc-quick')?.internalModel).toBe('sim-core-1');
    expect(live.current.admission.catalog).toBe(live.current.catalog);
  });
});
