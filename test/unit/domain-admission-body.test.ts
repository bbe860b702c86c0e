/** admitBody's refusals of the body itself (empty, too deep, not JSON, prototype poisoning), the copy threshold, and bodyEndpointOf. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { admitBody, bodyEndpointOf } from '../../sidecar/src/domain/admission.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { envelope } from '../../sidecar/src/domain/errors.js';
import { MAX_JSON_DEPTH } from '../../sidecar/src/domain/json-guard.js';
import { COPY_MIN_BYTES } from '../../sidecar/src/domain/upstream-body.js';

const cfg = parseConfig(defaultConfig('svc'));
const catalog = new Catalog(cfg.models, 'svc');
const policy = { catalog, defaultTemperature: 0.7, maxEmbeddingInputs: 256, maxRequestBytes: 1 << 20 };

/** The refusal as the caller sees it: HTTP status and the whole error envelope. */
function refusal(endpoint: 'chat' | 'embeddings', body: Buffer | string | null) {
  const a = admitBody(endpoint, 'POST', typeof body === 'string' ? Buffer.from(body) : body, policy);
  if (a.ok) throw new Error(`admitted: ${a.upstreamBody.toString()}`);
  return { status: a.error.entry.status, ...envelope(a.error, 'req_1') };
}

function admitted(endpoint: 'chat' | 'embeddings', text: string) {
  const a = admitBody(endpoint, 'POST', Buffer.from(text), policy);
  if (!a.ok) throw new Error(`refused: ${a.error.message}`);
  return a;
}

const invalidBody = (param: string, message: string) => ({
  status: 400,
  error: { message, type: 'invalid_request_error', param, code: 'invalid_request', request_id: 'req_1' },
});

const REQUIRED = 'A JSON request body is required.';
const TOO_DEEP = `The request body nests deeper than ${MAX_JSON_DEPTH} levels.`;
const NOT_JSON = 'The request body is not valid JSON.';
const POISONED = 'A __proto__ key (or constructor.prototype) is not accepted in a request body.';

/** A caller's value no refusal may echo. */
const SECRET = 'sk-live-7f3a9c';

const chat = (extra = '') => `{"model":"svc-core","messages":[{"role":"user","content":"${SECRET}"${extra}}]}`;
const nested = (depth: number, inner = '1') => `${'['.repeat(depth)}${inner}${']'.repeat(depth)}`;

describe('bodyEndpointOf', () => {
  it('names the chat and the embeddings endpoints under the prefix, with or without a query', () => {
    expect(bodyEndpointOf('/v1/chat/completions', '/v1')).toBe('chat');
    expect(bodyEndpointOf('/v1/embeddings', '/v1')).toBe('embeddings');
    expect(bodyEndpointOf('/v1/embeddings?trace=1', '/v1')).toBe('embeddings');
    expect(bodyEndpointOf('/api/v2/embeddings', '/api/v2')).toBe('embeddings');
  });

  it('names nothing else: other paths, other prefixes, sub-paths, the empty path', () => {
    for (const path of ['', '/', '/v1', '/v1/', '/v1/models', '/embeddings', '/v2/embeddings', '/v1/embeddings/', '/v1/embeddings/x', '/v1/embedding', '?x=/v1/embeddings']) {
      expect(bodyEndpointOf(path, '/v1'), path).toBeNull();
    }
    expect(bodyEndpointOf('/v1/embeddings', '/api/v2')).toBeNull();
  });
});

describe('admitBody with no body', () => {
  it('refuses a missing body and an empty one alike, on either endpoint', () => {
    for (const endpoint of ['chat', 'embeddings'] as const) {
      expect(refusal(endpoint, null)).toEqual(invalidBody('body', REQUIRED));
      expect(refusal(endpoint, Buffer.alloc(0))).toEqual(invalidBody('body', REQUIRED));
    }
  });

  it('tells white space apart from nothing: that is a body, just not JSON', () => {
    expect(refusal('chat', ' ')).toEqual(invalidBody('body', NOT_JSON));
  });
});

describe('admitBody with a body nested too deep', () => {
  it(`refuses more than ${MAX_JSON_DEPTH} levels before parsing, as the body`, () => {
    // Valid JSON, and a valid chat request but for the depth of one extra field.
    const deep = `{"model":"svc-core","messages":[{"role":"user","content":"hi"}],"metadata":${nested(MAX_JSON_DEPTH, `"${SECRET}"`)}}`;
    expect(JSON.parse(deep)).toBeTruthy();
    expect(refusal('chat', deep)).toEqual(invalidBody('body', TOO_DEEP));
    expect(refusal('embeddings', nested(MAX_JSON_DEPTH + 1))).toEqual(invalidBody('body', TOO_DEEP));
    expect(refusal('chat', `{"a":${nested(MAX_JSON_DEPTH)}}`)).toEqual(invalidBody('body', TOO_DEEP));
  });

  it('refuses depth before validity: an unclosed nest too deep is too deep, not invalid JSON', () => {
    expect(refusal('chat', '['.repeat(MAX_JSON_DEPTH + 1))).toEqual(invalidBody('body', TOO_DEEP));
  });

  it(`takes exactly ${MAX_JSON_DEPTH} levels on to validation`, () => {
    // 64 levels in all (the object, the messages array, the message, 61 in the field): admitted.
    const ok = `{"model":"svc-core","messages":[{"role":"user","content":"hi","name":${nested(MAX_JSON_DEPTH - 3)}}]}`;
    expect(admitted('chat', ok).ctx).toBeTruthy();
    // At the limit but not an object: the validator's refusal, not the depth's.
    expect(refusal('chat', nested(MAX_JSON_DEPTH))).toEqual(invalidBody('body', 'The request body must be a JSON object.'));
  });

  it('counts brackets inside strings as text, not nesting', () => {
    expect(admitted('chat', `{"model":"svc-core","messages":[{"role":"user","content":"${'[{'.repeat(MAX_JSON_DEPTH + 1)}"}]}`).ctx).toBeTruthy();
  });
});

describe('admitBody with a body that is not JSON', () => {
  it('refuses it as the body, whatever is wrong with it', () => {
    for (const text of [chat().slice(0, -1), `{"model":"svc-core","messages":[{"role":"user","content":'${SECRET}'}]}`, `${chat()} ${SECRET}`, SECRET, '{', '"unterminated', 'undefined', '{"a":1,}']) {
      expect(refusal('chat', text), text).toEqual(invalidBody('body', NOT_JSON));
      expect(refusal('embeddings', text), text).toEqual(invalidBody('body', NOT_JSON));
    }
  });

  it('tells invalid JSON apart from valid JSON of the wrong shape', () => {
    expect(refusal('chat', 'null')).toEqual(invalidBody('body', 'The request body must be a JSON object.'));
    expect(refusal('chat', `"${SECRET}"`)).toEqual(invalidBody('body', 'The request body must be a JSON object.'));
  });
});

describe('admitBody with a prototype-poisoning key', () => {
  it('names the top-level field the __proto__ key is in, however deep', () => {
    expect(refusal('chat', chat(',"__proto__":{"isAdmin":true}'))).toEqual(invalidBody('messages', POISONED));
    expect(refusal('chat', `{"__proto__":{"x":"${SECRET}"},"model":"svc-core","messages":[{"role":"user","content":"hi"}]}`)).toEqual(invalidBody('__proto__', POISONED));
    expect(refusal('chat', `{"model":"svc-core","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"properties":{"__proto__":{"type":"string"}}}}}]}`)).toEqual(
      invalidBody('tools', POISONED),
    );
    expect(refusal('embeddings', `{"model":"svc-embed","input":["${SECRET}"],"metadata":{"a":[{"__proto__":null}]}}`)).toEqual(invalidBody('metadata', POISONED));
  });

  it("names body, not the field, when the field is the caller's own key: no echo of its name, however long", () => {
    const secretKey = 'sk-live-SECRET-api-key';
    const long = 'k'.repeat(100_000);
    for (const key of [secretKey, long, 'x']) {
      const text = `{"model":"svc-core","messages":[{"role":"user","content":"hi"}],${JSON.stringify(key)}:{"__proto__":1}}`;
      const r = refusal('chat', text);
      expect(r).toEqual(invalidBody('body', POISONED));
    }
    expect(refusal('embeddings', `{"model":"svc-embed","input":["hi"],"${secretKey}":[{"constructor":{"prototype":{}}}]}`)).toEqual(invalidBody('body', POISONED));
  });

  it('refuses a constructor carrying a prototype, and a __proto__ spelled with escapes', () => {
    expect(refusal('chat', chat(',"constructor":{"prototype":{"polluted":1}}'))).toEqual(invalidBody('messages', POISONED));
    expect(refusal('chat', `{"constructor":{"prototype":{}},"model":"svc-core","messages":[{"role":"user","content":"hi"}]}`)).toEqual(invalidBody('constructor', POISONED));
    expect(refusal('chat', chat(',"\\u005f_proto__":{}'))).toEqual(invalidBody('messages', POISONED));
  });

  it('refuses it in a large body too (one that would be copied)', () => {
    const text = chat(`,"__proto__":{"x":"${'p'.repeat(COPY_MIN_BYTES)}"}`);
    expect(Buffer.byteLength(text)).toBeGreaterThan(COPY_MIN_BYTES);
    expect(refusal('chat', text)).toEqual(invalidBody('messages', POISONED));
  });

  it('lets the words through where they are not such a key', () => {
    const a = admitted('chat', `{"model":"svc-core","messages":[{"role":"user","content":"__proto__ and constructor.prototype"},{"role":"assistant","content":"ok","constructor":"plain"}]}`);
    expect(JSON.parse(a.upstreamBody.toString()).messages[0].content).toBe('__proto__ and constructor.prototype');
  });
});

describe('admitBody at the copy threshold', () => {
  /** A chat request of exactly `size` bytes whose messages are written with spaces of their own. */
  function chatOfSize(size: number): { text: string; messages: string } {
    const shell = (pad: string) => `{"model":"svc-core","messages": [ {"role" : "user", "content" : "${pad}"} ] }`;
    const text = shell('m'.repeat(size - Buffer.byteLength(shell(''))));
    expect(Buffer.byteLength(text)).toBe(size);
    return { text, messages: text.slice(text.indexOf('['), text.lastIndexOf(']') + 1) };
  }

  it(`sends the messages of a body of exactly ${COPY_MIN_BYTES} bytes as the caller's bytes`, () => {
    const { text, messages } = chatOfSize(COPY_MIN_BYTES);
    const a = admitted('chat', text);
    expect(a.upstreamBody.toString()).toContain(`"messages":${messages}`);
    expect(a.ctx.promptBytes).toBe(Buffer.byteLength(messages));
  });

  it('serialises the messages of a body one byte smaller', () => {
    const { text, messages } = chatOfSize(COPY_MIN_BYTES - 1);
    const a = admitted('chat', text);
    const compact = JSON.stringify(JSON.parse(messages));
    expect(a.upstreamBody.toString()).toContain(`"messages":${compact}`);
    expect(a.ctx.promptBytes).toBe(Buffer.byteLength(compact));
  });
});

describe("admitBody's refusals of the body", () => {
  it("never echo the caller's text, and never carry it in param", () => {
    const cases = (s: string) => [
      s, // not JSON
      `{"model":"svc-core","messages":[{"role":"user","content":${JSON.stringify(s)}}]`, // unclosed
      `{"model":"svc-core","messages":[{"role":"user","content":${JSON.stringify(s)},"__proto__":{}}]}`, // poisoned
      `{"model":"svc-core","messages":[{"role":"user","content":${JSON.stringify(s)}}],"m":${nested(MAX_JSON_DEPTH)}}`, // too deep
    ];
    fc.assert(
      // Not text the gateway writes itself (a word of a message, a field it names).
      fc.property(fc.stringMatching(/^[A-Za-z0-9_-]{6,40}$/).filter((s) => ![REQUIRED, TOO_DEEP, NOT_JSON, POISONED, 'body messages'].some((m) => m.includes(s))), (s) => {
        for (const text of cases(s)) {
          const r = refusal('chat', text);
          expect(r.status).toBe(400);
          expect(r.error.message).not.toContain(s);
          expect(r.error.param).not.toContain(s);
        }
      }),
      { numRuns: 50 },
    );
  });
});
