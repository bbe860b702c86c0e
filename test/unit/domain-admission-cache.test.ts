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

describe('AdmissionCache', () => {
  it('hands an admission over once, for a body of the same size', () => {
    const c = new AdmissionCache();
    const a = admitted();
    c.put('req-1', body, a);
    expect(c.take('req-1', body)).toBe(a);
    expect(c.take('req-1', body)).toBeUndefined(); // taken once
    c.put('req-2', body, a);
    expect(c.take('req-2', Buffer.concat([body, Buffer.from(' ')]))).toBeUndefined(); // not the same body
    expect(c.take('req-2', body)).toBeUndefined(); // and gone
    expect(c.take('unknown', body)).toBeUndefined();
  });

  it('expires entries and stays bounded', () => {
    let now = 1_000;
    const c = new AdmissionCache(100, 2, () => now);
    const a = admitted();
    c.put('a', body, a);
    now += 200;
    expect(c.take('a', body)).toBeUndefined(); // expired
    c.put('b', body, a);
    c.put('c', body, a);
    c.put('d', body, a); // full of live entries: not kept
    expect(c.take('d', body)).toBeUndefined();
    expect(c.take('b', body)).toBe(a);
    now += 200;
    c.put('e', body, a); // the expired 'c' is swept to make room
    expect(c.take('e', body)).toBe(a);
    expect(c.take('', body)).toBeUndefined();
  });

  it('lets go of entries nobody takes as soon as they expire, long before the map is full', () => {
    let now = 1_000;
    const c = new AdmissionCache(100, 10_000, () => now);
    const a = admitted();
    for (let i = 0; i < 50; i++) c.put(`left-${i}`, body, a);
    expect(c.size).toBe(50);
    now += 101;
    c.put('next', body, a);
    expect(c.size).toBe(1);
    expect(c.take('next', body)).toBe(a);
  });
});
