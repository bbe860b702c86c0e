/** admitEmbeddings: input shapes, request count, limits, encoding_format. */
import { describe, expect, it } from 'vitest';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { admitEmbeddings } from '../../sidecar/src/domain/embeddings-request.js';

const cfg = parseConfig(defaultConfig('svc'));
const catalog = new Catalog(cfg.models, cfg.brand);

const admit = (body: Record<string, unknown>, max = 4) => admitEmbeddings({ model: 'svc-embed', ...body }, catalog, max);

function accepted(body: Record<string, unknown>, max = 4) {
  const a = admit(body, max);
  if (!a.ok) throw new Error(`refused: ${a.error.message}`);
  return { upstream: JSON.parse(a.upstreamBody.toString()) as Record<string, unknown>, ctx: a.ctx };
}

function refused(body: unknown, max = 4) {
  const a = admitEmbeddings(body, catalog, max);
  if (a.ok) throw new Error('expected a refusal');
  return { code: a.error.entry.code, status: a.error.entry.status, param: a.error.param, message: a.error.message };
}

describe('accepted inputs', () => {
  it('a string counts one request and the model becomes internal', () => {
    const { upstream, ctx } = accepted({ input: 'hello world', user: 'u' });
    expect(upstream).toEqual({ model: 'sim-embed-1', input: 'hello world', user: 'u' });
    expect(ctx).toMatchObject({ endpoint: 'embeddings', stream: false, floor: null, requestCount: 1, maxTokens: null });
    expect(ctx.resolved.alias).toBe('svc-embed');
  });

  it('an array counts one request per string', () => {
    const { ctx, upstream } = accepted({ model: 'svc-embed-2026-08', input: ['a', 'b', 'c'] });
    expect(ctx.requestCount).toBe(3);
    expect(upstream.input).toEqual(['a', 'b', 'c']);
    expect(ctx.resolved.floating).toBe(false);
  });

  it('exactly the maximum number of inputs is fine', () => {
    expect(accepted({ input: ['a', 'b', 'c', 'd'] }).ctx.requestCount).toBe(4);
  });

  it('estimates the prompt from the input strings', () => {
    expect(accepted({ input: 'x'.repeat(40) }).ctx.promptEstimate).toBe(10);
    expect(accepted({ input: ['x'.repeat(8), 'y'.repeat(8)] }).ctx.promptEstimate).toBe(4);
  });

  it.each(['float', 'base64', null])('encoding_format %s is accepted', (encoding_format) => {
    expect(accepted({ input: 'a', encoding_format }).upstream.encoding_format).toBe(encoding_format);
  });
});

describe('refusals', () => {
  it.each([
    ['empty string', { input: '' }],
    ['empty array', { input: [] }],
    ['array with an empty string', { input: ['a', ''] }],
    ['missing input', {}],
    ['null input', { input: null }],
  ])('%s → SRV_001 non-empty', (_name, body) => {
    const r = refused({ model: 'svc-embed', ...body });
    expect(r).toMatchObject({ code: 'SRV_001', status: 400, param: null });
    expect(r.message).toContain('non-empty');
  });

  it.each([
    ['numbers', { input: [1, 2] }],
    ['mixed', { input: ['a', 3] }],
    ['nested arrays', { input: [['a']] }],
    ['an object', { input: { text: 'a' } }],
    ['a number', { input: 42 }],
  ])('%s → invalid_request param input', (_name, body) => {
    expect(refused({ model: 'svc-embed', ...body })).toMatchObject({ code: 'invalid_request', param: 'input' });
  });

  it('too many inputs → invalid_request param input naming the limit', () => {
    const r = refused({ model: 'svc-embed', input: ['a', 'b', 'c', 'd', 'e'] });
    expect(r).toMatchObject({ code: 'invalid_request', param: 'input' });
    expect(r.message).toContain('4');
  });

  it('an unknown encoding_format → param encoding_format, value not echoed', () => {
    const r = refused({ model: 'svc-embed', input: 'a', encoding_format: 'int8-zz' });
    expect(r).toMatchObject({ code: 'invalid_request', param: 'encoding_format' });
    expect(r.message).not.toContain('int8-zz');
  });

  it('a chat alias is sent to /chat/completions; an internal name is unknown', () => {
    const wrong = refused({ model: 'svc-core', input: 'a' });
    expect(wrong.code).toBe('SRV_001');
    expect(wrong.message).toContain('/chat/completions');
    expect(wrong.message).toContain('svc-embed');
    const internal = refused({ model: 'sim-embed-1', input: 'a' });
    expect(internal.code).toBe('SRV_001');
    expect(internal.message).not.toContain('sim-embed-1');
  });

  it('a non-object body → param body; missing model → param model', () => {
    expect(refused([])).toMatchObject({ code: 'invalid_request', param: 'body' });
    expect(refused({ input: 'a' })).toMatchObject({ code: 'invalid_request', param: 'model' });
  });
});
