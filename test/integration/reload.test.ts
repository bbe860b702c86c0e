import { readFileSync, writeFileSync } from 'node:fs';
import { parse as parseYaml, stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from '../harness/gateway.js';
import { post } from '../harness/http.js';
import { until } from '../harness/until.js';
import { costOf } from '../../sidecar/src/domain/billing/pricing.js';
import { defaultPrices } from '../../sidecar/src/config/defaults.js';

/**
 * Alias moves without a restart: the configuration is reloaded (operator API
 * or SIGHUP), validated first, applied at once to new requests on every
 * instance (Redis pub/sub), while requests in flight finish on what they
 * were admitted with. Two instances on one Redis.
 */
let a: TestGateway;
let b: TestGateway;
const INTERNAL = ['sim-quick-1', 'sim-core-1', 'sim-deep-r1', 'sim-embed-1'];
type Raw = Record<string, any>;

beforeAll(async () => {
  // A request below stays in flight for 3 s while the configuration changes: an idle timeout well above that.
  const config = { upstream: { idleTimeoutMs: 30_000 } };
  a = await startGateway({ store: 'redis', config });
  b = await startGateway({ store: 'redis', redisUrl: a.redis!.url, config });
});
afterAll(async () => {
  await b?.stop();
  await a?.stop();
});

const readConfig = (gw: TestGateway): Raw => parseYaml(readFileSync(gw.stack.configPath, 'utf8'));
const writeConfig = (gw: TestGateway, edit: (c: Raw) => void) => {
  const c = readConfig(gw);
  edit(c);
  writeFileSync(gw.stack.configPath, stringify(c));
};
const family = (c: Raw, alias: string) => c.models.find((f: Raw) => f.alias === alias);
const reload = async (gw: TestGateway) => {
  const res = await fetch(`${gw.stack.adminUrl}/admin/config/reload`, { method: 'POST', headers: { authorization: `Bearer ${gw.stack.adminToken}` } });
  return { status: res.status, json: (await res.json()) as any };
};
/** The internal model the provider was asked for by the last request of this instance. */
const lastModel = async (gw: TestGateway) => {
  const s = await gw.sim('/_sim/stats');
  return s.recent[s.recent.length - 1].body.model as string;
};
const chat = (gw: TestGateway, model = 'svc-quick', content = 'which model') =>
  post(`${gw.base}/chat/completions`, { model, max_tokens: 10, messages: [{ role: 'user', content }] }, gw.key);
/** The model an instance serves an alias with now, polled for up to 10 s (the move travels over pub/sub). */
const servedBy = async (gw: TestGateway, alias: string, want: string) => {
  let got = '';
  await until(`${alias} served by ${want}`, async () => {
    const r = await chat(gw, alias);
    expect(r.status).toBe(200);
    expect(r.json.model).toBe(alias); // the caller only ever sees the alias
    got = await lastModel(gw);
    return got === want;
  }, 10_000);
  return got;
};
const settingsHashOf = async (gw: TestGateway) => {
  const text = await (await fetch(`${gw.stack.adminUrl}/metrics`, { headers: { authorization: `Bearer ${gw.stack.adminToken}` } })).text();
  const m = /^gateway_config_info\{settings_hash="([0-9a-f]+)"\} 1$/m.exec(text);
  expect(m, 'gateway_config_info').not.toBeNull();
  return m![1];
};
const sidecarJson = (gw: TestGateway) =>
  gw.stack
    .process('sidecar')
    .lines.flatMap((l) => {
      try {
        return [JSON.parse(l)];
      } catch {
        return [];
      }
    });

describe('configuration reload', () => {
  it('moves a floating alias on every instance through one operator call, and logs an audit line', async () => {
    const firstHash = await settingsHashOf(a);
    expect(firstHash).toBe(await settingsHashOf(b));
    expect(await servedBy(a, 'svc-quick', 'sim-quick-1')).toBe('sim-quick-1');
    expect(await servedBy(b, 'svc-quick', 'sim-quick-1')).toBe('sim-quick-1');
    writeConfig(a, (c) => {
      family(c, 'svc-quick').model = 'sim-core-1';
    });
    const r = await reload(a);
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ status: 'applied', generation: 1, aliases_moved: ['svc-quick'] });
    expect(await lastModelAfter(a)).toBe('sim-core-1');
    // b never had its file touched: the move reached it over Redis.
    expect(await servedBy(b, 'svc-quick', 'sim-core-1')).toBe('sim-core-1');
    // The pinned alias stays where it was.
    await chat(a, 'svc-quick-2026-08');
    expect(await lastModel(a)).toBe('sim-quick-1');

    const audit = sidecarJson(a).find((l) => l.event === 'config_reload' && l.result === 'applied');
    expect(audit).toMatchObject({ audit: true, source: 'api', generation: 1, aliases_moved: ['svc-quick'] });
    const peer = sidecarJson(b).find((l) => l.event === 'config_reload' && l.result === 'applied');
    expect(peer).toMatchObject({ source: 'peer', generation: 1, aliases_moved: ['svc-quick'] });
    // Both instances now report the same settings fingerprint (gateway_config_info), a new one.
    expect(await settingsHashOf(a)).toBe(await settingsHashOf(b));
    expect(await settingsHashOf(a)).not.toBe(firstHash);
    // Reloading the same file again changes nothing.
    expect((await reload(a)).json).toMatchObject({ status: 'unchanged', generation: 1 });
  });

  it('refuses a pinned alias move, a bad file and a restart-only change as a whole, saying why, changing nothing', async () => {
    const before = readFileSync(a.stack.configPath, 'utf8');
    const refusals: Array<[string, (c: Raw) => void, RegExp]> = [
      ['pinned move', (c) => void (family(c, 'svc-quick').pinnedModel = 'sim-core-1'), /pinned alias svc-quick-2026-08 cannot be moved/],
      ['pinned removal', (c) => void (c.models = c.models.filter((f: Raw) => f.alias !== 'svc-embed')), /pinned alias svc-embed-2026-08 cannot be removed/],
      ['unpriced model', (c) => void (family(c, 'svc-core').model = 'sim-brand-new'), /has no price/],
      ['invalid value', (c) => void (c.billing.holdTtlSeconds = -5), /billing\.holdTtlSeconds/],
      ['restart-only', (c) => void (c.upstream.baseUrl = 'http://127.0.0.1:1/v1'), /upstream: changing it needs a restart/],
    ];
    for (const [what, edit, why] of refusals) {
      writeConfig(a, (c) => {
        family(c, 'svc-quick').model = 'sim-deep-r1'; // a valid move riding along: must not be applied either
        edit(c);
      });
      const r = await reload(a);
      expect(r.status, what).toBe(422);
      expect(r.json.error).toMatch(/nothing changed/);
      expect(r.json.problems.join('\n'), what).toMatch(why);
      for (const m of [...INTERNAL, 'sim-brand-new']) expect(JSON.stringify(r.json), what).not.toContain(m);
      writeFileSync(a.stack.configPath, before);
    }
    writeFileSync(a.stack.configPath, 'models: [oops\n');
    const broken = await reload(a);
    expect(broken.status).toBe(422);
    expect(broken.json.problems.length).toBeGreaterThan(0);
    writeFileSync(a.stack.configPath, before);
    // Still generation 1, svc-quick still on sim-core-1 everywhere.
    expect(await servedBy(a, 'svc-quick', 'sim-core-1')).toBe('sim-core-1');
    expect(await servedBy(b, 'svc-quick', 'sim-core-1')).toBe('sim-core-1');
    const rejected = sidecarJson(a).filter((l) => l.event === 'config_reload' && l.result === 'rejected');
    expect(rejected.length).toBeGreaterThanOrEqual(refusals.length + 1);
    // No log line of either sidecar names an internal model.
    for (const gw of [a, b]) {
      const all = gw.stack.process('sidecar').lines.join('\n');
      for (const m of [...INTERNAL, 'sim-brand-new']) expect(all).not.toContain(m);
    }
  });

  it('a request in flight finishes on the assignment and price it was admitted with; SIGHUP reloads and reaches the other instance', async () => {
    // Slow request on svc-quick (now sim-core-1) through b: admitted (at the provider) before the change, still in flight during it.
    const inFlightAtProvider = async () => (await b.sim('/_sim/stats')).recent.some((x: Raw) => String(x.body?.messages?.[0]?.content).startsWith('in flight'));
    expect(await inFlightAtProvider()).toBe(false);
    const slow = chat(b, 'svc-quick', 'in flight #sim:delay=3000 #sim:tokens=4');
    await until('the slow request at the provider', inFlightAtProvider, 10_000);
    // b's file: svc-quick moves back to sim-quick-1 and sim-core-1 gets ten times dearer.
    writeConfig(b, (c) => {
      family(c, 'svc-quick').model = 'sim-quick-1';
      c.billing.prices['sim-core-1'] = { inputPerMillion: 5_000_000, outputPerMillion: 15_000_000 };
    });
    b.stack.process('sidecar').signal('SIGHUP');
    const done = await slow;
    expect(done.status).toBe(200);
    expect(done.json.model).toBe('svc-quick');
    // The slow request reached the provider as sim-core-1 (its admission) ...
    const s = await b.sim('/_sim/stats');
    const inFlight = s.recent.find((x: Raw) => String(x.body?.messages?.[0]?.content).startsWith('in flight'));
    expect(inFlight.body.model).toBe('sim-core-1');
    // ... and is charged at the price it was held at.
    const id = done.headers.get('x-request-id');
    let rec: Raw | undefined;
    for (let i = 0; i < 40 && !rec; i++) {
      rec = (await b.admin.usageRecords(b.tenantId, 200)).data.find((x) => x.requestId === id);
      if (!rec) await new Promise((r) => setTimeout(r, 50));
    }
    expect(rec).toBeDefined();
    const usage = { promptTokens: done.json.usage.prompt_tokens, completionTokens: done.json.usage.completion_tokens };
    expect(rec!.cost).toBe(costOf({ perInput: 0, ...defaultPrices['sim-core-1'] }, usage, 1));
    // New requests: the new assignment on b (SIGHUP) and on a (published).
    expect(await servedBy(b, 'svc-quick', 'sim-quick-1')).toBe('sim-quick-1');
    expect(await servedBy(a, 'svc-quick', 'sim-quick-1')).toBe('sim-quick-1');
    const audit = sidecarJson(b).find((l) => l.event === 'config_reload' && l.source === 'sighup');
    expect(audit).toMatchObject({ result: 'applied', aliases_moved: ['svc-quick'], prices_changed: 1 });
  });
});

async function lastModelAfter(gw: TestGateway): Promise<string> {
  const r = await chat(gw);
  expect(r.status).toBe(200);
  return lastModel(gw);
}
