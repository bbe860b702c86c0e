import { describe, expect, it } from 'vitest';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { admitBody } from '../../sidecar/src/domain/admission.js';
import { AdmissionCache } from '../../sidecar/src/domain/admission-cache.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';

const cfg = parseConfig(defaultConfig('svc'));
const policy = { catalog: new Catalog(cfg.models, 'svc'), defaultTemperature: 0.7, maxEmbeddingInputs: 256, maxRequestBytes: 1 << 20 };
const body = Buffer.from(JSON.stringify({ model: 'svc-core', messages: [{ role: 'user', content: 'hi' }] }));
const admitted = () => {
  const a = admitBody('chat', 'POST', body, policy);
  if (!a.ok) throw new Error('refused');
  return a;
};

const decision = { principal: { tenantId: 'ten_1', subjectId: 'key_1', method: 'api_key' as const, scopes: ['inference'], keyId: 'key_1', role: null }, held: 1200, leased: true, lease: 'lease_1' };

describe('AdmissionCache', () => {
  it('hands an admission over once, for a body of the same size', () => {
    const c = new AdmissionCache();
    const a = admitted();
    c.put('req-1', body, a, decision);
    expect(c.take('req-1', body)).toBe(a);
    expect(c.take('req-1', body)).toBeUndefined(); // taken once
    c.put('req-2', body, a, decision);
    expect(c.take('req-2', Buffer.concat([body, Buffer.from(' ')]))).toBeUndefined(); // not the same body
    expect(c.take('req-2', body)).toBeUndefined(); // and gone
    expect(c.take('unknown', body)).toBeUndefined();
  });

  it('tells the gate’s decision for a live entry without taking it (ext_proc then skips the metadata Envoy forwards)', () => {
    let now = 1_000;
    const c = new AdmissionCache(100, 10, () => now);
    const a = admitted();
    c.put('req-1', body, a, decision);
    expect(c.decisionOf('req-1')).toBe(decision);
    expect(c.decisionOf('req-1')).toBe(decision); // still there
    expect(c.take('req-1', body)).toBe(a); // and the admission too
    expect(c.decisionOf('req-1')).toBeUndefined(); // gone with the take
    c.put('req-2', body, a, decision);
    now += 100;
    expect(c.decisionOf('req-2')).toBeUndefined(); // expired
    expect(c.decisionOf('other')).toBeUndefined();
  });

  it('expires entries and stays bounded', () => {
    let now = 1_000;
    const c = new AdmissionCache(100, 2, () => now);
    const a = admitted();
    c.put('a', body, a, decision);
    now += 200;
    expect(c.take('a', body)).toBeUndefined(); // expired
    c.put('b', body, a, decision);
    c.put('c', body, a, decision);
    c.put('d', body, a, decision); // full of live entries: not kept
    expect(c.take('d', body)).toBeUndefined();
    expect(c.take('b', body)).toBe(a);
    now += 200;
    c.put('e', body, a, decision); // the expired 'c' is swept to make room
    expect(c.take('e', body)).toBe(a);
    expect(c.take('', body)).toBeUndefined();
    c.put('', body, a, decision); // a request without an id is not kept
    expect(c.size).toBe(0);
    expect(c.decisionOf('')).toBeUndefined();
  });

  it('an entry lives until, not at, its expiry', () => {
    let now = 1_000;
    const c = new AdmissionCache(100, 10, () => now);
    const a = admitted();
    c.put('a', body, a, decision);
    c.put('b', body, a, decision);
    now += 99;
    expect(c.decisionOf('a')).toBe(decision);
    expect(c.take('a', body)).toBe(a);
    now += 1; // exactly at b's expiry
    expect(c.decisionOf('b')).toBeUndefined();
    expect(c.take('b', body)).toBeUndefined();
    c.put('c', body, a, decision);
    now += 99;
    c.put('d', body, a, decision); // sweeps only what has expired: c has 1 ms left
    expect(c.size).toBe(2);
  });

  it('lets go of entries nobody takes as soon as they expire, long before the map is full', () => {
    let now = 1_000;
    const c = new AdmissionCache(100, 10_000, () => now);
    const a = admitted();
    for (let i = 0; i < 50; i++) c.put(`left-${i}`, body, a, decision);
    expect(c.size).toBe(50);
    now += 101;
    c.put('next', body, a, decision);
    expect(c.size).toBe(1);
    expect(c.take('next', body)).toBe(a);
  });

  it('a miss (ext_authz ran in another process) admits the body again to the same result: what is sent upstream and what is priced', () => {
    // Each process builds its own catalogue from the same configuration.
    const other = { ...policy, catalog: new Catalog(parseConfig(defaultConfig('svc')).models, 'svc') };
    const bodies: Array<['chat' | 'embeddings', unknown]> = [
      ['chat', { model: 'svc-core', messages: [{ role: 'user', content: 'hi' }] }],
      ['chat', { model: 'svc-quick', stream: true, max_tokens: 20, messages: [{ role: 'system', content: 's' }, { role: 'user', content: 'x' }] }],
      ['chat', { model: 'svc-deep', max_tokens: 10, temperature: 0.2, tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }], messages: [{ role: 'user', content: 'y' }] }],
      ['embeddings', { model: 'svc-embed', input: ['a', 'b'] }],
    ];
    for (const [endpoint, json] of bodies) {
      const raw = Buffer.from(JSON.stringify(json));
      const here = admitBody(endpoint, 'POST', raw, policy);
      expect(here.ok).toBe(true);
      const c = new AdmissionCache();
      if (here.ok) c.put('req-x', raw, here, decision);
      const there = new AdmissionCache().take('req-x', raw) ?? admitBody(endpoint, 'POST', raw, other); // the other process: a miss
      expect(there).toEqual(here);
      expect(c.take('req-x', raw)).toBe(here); // this process: the hit hands over the same admission
    }
  });
});
