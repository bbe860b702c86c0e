/** The OpenAPI document: committed and current, valid OpenAPI 3.1, covering every path, true to the validators. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { describe, expect, it } from 'vitest';
import { buildOpenApi, openApiText } from '../../sidecar/account/openapi.js';
import { KNOWN_PATHS } from '../../sidecar/account/paths.js';
import { ChatRequest, EmbeddingsRequest } from '../../sidecar/src/api/gateway-schemas.js';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { admitChat } from '../../sidecar/src/domain/chat-request.js';
import { admitEmbeddings } from '../../sidecar/src/domain/embeddings-request.js';
import { REPO_ROOT } from '../../sidecar/stack/paths.js';

/**
 * The vendored OpenAPI 3.1 schema (no Schema Object validation). Ajv mis-evaluates
 * its `$dynamicRef: "#meta"` together with `unevaluatedProperties`, so the
 * dynamic reference is pointed statically at the same definition it resolves to
 * in this schema (`$defs/schema`, the `$dynamicAnchor: meta`).
 */
function oasSchema(): object {
  const text = readFileSync(join(REPO_ROOT, 'docs', 'vendor', 'openapi-3.1-schema.json'), 'utf8');
  return JSON.parse(text.replaceAll('"$dynamicRef": "#meta"', '"$ref": "#/$defs/schema"')) as object;
}

const committed = readFileSync(join(REPO_ROOT, 'docs', 'openapi.json'), 'utf8');
const doc = buildOpenApi() as { paths: Record<string, Record<string, any>> };

describe('docs/openapi.json', () => {
  it('is what the schemas generate now (run `npm run openapi` after changing them)', () => {
    expect(committed).toBe(openApiText());
  });

  it('is a valid OpenAPI 3.1 document, and every schema in it is a valid JSON Schema 2020-12', () => {
    const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
    const validate = ajv.compile(oasSchema());
    expect(validate(JSON.parse(committed)), JSON.stringify(validate.errors, null, 2)).toBe(true);
    const schemas: unknown[] = [];
    for (const item of Object.values(doc.paths)) {
      for (const op of Object.values(item)) {
        for (const p of op.parameters ?? []) schemas.push(p.schema);
        if (op.requestBody) schemas.push(op.requestBody.content['application/json'].schema);
      }
    }
    const plain = new Ajv2020({ strict: false });
    for (const s of schemas) expect(() => plain.compile(s as object)).not.toThrow();
    expect(schemas.length).toBeGreaterThan(10);
  });

  it('the validity check can fail: a broken document is refused', () => {
    const validate = new Ajv2020({ strict: false, validateFormats: false }).compile(oasSchema());
    const broken = JSON.parse(committed);
    broken.paths['/v1/models'].get.responses = { ok: 'yes' };
    expect(validate(broken)).toBe(false);
  });

  it('covers every path of the account service and the gateway', () => {
    const documented = Object.keys(doc.paths).map((p) => p.replace(/\{[a-z_]+\}/g, 'x'));
    for (const p of KNOWN_PATHS) expect(documented.some((d) => p.pattern.test(d)), p.template).toBe(true);
    for (const p of ['/v1/models', '/v1/chat/completions', '/v1/embeddings', '/v1/usage', '/v1/whoami']) expect(doc.paths[p]).toBeDefined();
  });
});

describe('the gateway request schemas agree with the hot-path validators', () => {
  const cfg = parseConfig(defaultConfig('svc'));
  const catalog = new Catalog(cfg.models, cfg.brand);
  const m = [{ role: 'user', content: 'hi' }];
  const chats: unknown[] = [
    { model: 'svc-core', messages: m },
    { model: 'svc-core', messages: [] },
    { model: 'svc-core', messages: [{ role: 'robot', content: 'x' }] },
    { model: 'svc-core', messages: [{ role: 'assistant', content: null }] },
    { model: 'svc-core', messages: m, max_tokens: 0 },
    { model: 'svc-core', messages: m, max_tokens: 1_000_000 },
    { model: 'svc-core', messages: m, max_tokens: 1_000_001 },
    { model: 'svc-core', messages: m, max_tokens: 2.5 },
    { model: 'svc-core', messages: m, max_completion_tokens: 10 },
    { model: 'svc-core', messages: m, temperature: 2 },
    { model: 'svc-core', messages: m, temperature: 2.1 },
    { model: 'svc-core', messages: m, temperature: 'hot' },
    { model: 'svc-core', messages: m, stream: 'yes' },
    { model: 'svc-core', messages: m, stream: true, stream_options: { include_usage: false } },
    { model: 'svc-core', messages: m, stream_options: 3 },
    { model: 'svc-core', messages: m, tools: {} },
    { model: 'svc-core', messages: m, tools: [], tool_choice: 'auto' },
    { model: 'svc-core', messages: m, tool_choice: 7 },
    { model: 'svc-core', messages: m, n: 2 },
    { model: 'svc-core', messages: m, n: 1, user: 'extra fields pass through' },
  ];
  it.each(chats.map((b) => [JSON.stringify(b), b]))('chat %s', (_name, body) => {
    expect(ChatRequest.safeParse(body).success).toBe(admitChat(body, catalog, { defaultTemperature: 0.7 }).ok);
  });
  const embeds: unknown[] = [
    { model: 'svc-embed', input: 'x' },
    { model: 'svc-embed', input: '' },
    { model: 'svc-embed', input: [] },
    { model: 'svc-embed', input: ['a', ''] },
    { model: 'svc-embed', input: ['a', 3] },
    { model: 'svc-embed', input: Array.from({ length: 256 }, () => 'a') },
    { model: 'svc-embed', input: Array.from({ length: 257 }, () => 'a') },
    { model: 'svc-embed' },
  ];
  it.each(embeds.map((b) => [JSON.stringify(b).slice(0, 80), b]))('embeddings %s', (_name, body) => {
    expect(EmbeddingsRequest.safeParse(body).success).toBe(admitEmbeddings(body, catalog, 256).ok);
  });
});
