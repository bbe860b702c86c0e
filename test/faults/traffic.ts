/**
 * Mixed traffic for the fault suite: chat (JSON), streams, embeddings, client
 * aborts and provider failures (simulator directives), a fixed number of
 * requests over a fixed number of connections. Every result is recorded, so
 * that what completed can be looked up in the usage counter afterwards.
 */
import { readSse } from '../harness/sse.js';

export type Kind = 'chat' | 'stream' | 'embeddings' | 'abort' | 'provider-error' | 'midstream-error';

export interface Outcome {
  readonly kind: Kind;
  readonly status: number;
  readonly requestId: string | null;
  /** The caller got the whole answer: a JSON 200, or a stream that ended with [DONE]. */
  readonly completed: boolean;
}

const KINDS: readonly Kind[] = ['chat', 'stream', 'stream', 'embeddings', 'abort', 'provider-error', 'midstream-error', 'chat'];

function body(kind: Kind, i: number): unknown {
  const msg = (content: string, extra: Record<string, unknown> = {}) => ({
    model: 'svc-quick',
    max_tokens: 60,
    messages: [{ role: 'user', content: `${content} #${i}` }],
    ...extra,
  });
  switch (kind) {
    case 'chat':
      return msg('hello #sim:tokens=12');
    case 'stream':
    case 'abort':
      return msg('tell a story #sim:tokens=40 #sim:chunk-delay=25', { stream: true });
    case 'embeddings':
      return { model: 'svc-embed', input: [`a #${i}`, `b #${i}`] };
    case 'provider-error':
      return msg('fail #sim:status=500');
    case 'midstream-error':
      return msg('break #sim:midstream-error #sim:tokens=20 #sim:chunk-delay=20', { stream: true });
  }
}

async function one(base: string, key: string, kind: Kind, i: number): Promise<Outcome> {
  try {
    if (kind === 'stream' || kind === 'abort' || kind === 'midstream-error') {
      const r = await readSse(`${base}/chat/completions`, body(kind, i), key, {
        timeoutMs: 60_000,
        ...(kind === 'abort' ? { abortAfterEvents: 3 } : {}),
      });
      return { kind, status: r.status, requestId: r.headers.get('x-request-id'), completed: r.events.at(-1) === '[DONE]' };
    }
    const path = kind === 'embeddings' ? 'embeddings' : 'chat/completions';
    const res = await fetch(`${base}/${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': key },
      body: JSON.stringify(body(kind, i)),
      signal: AbortSignal.timeout(60_000),
    });
    await res.arrayBuffer();
    return { kind, status: res.status, requestId: res.headers.get('x-request-id'), completed: res.status === 200 };
  } catch {
    return { kind, status: 0, requestId: null, completed: false };
  }
}

export interface Traffic {
  /** Resolves with every outcome once all requests are done. */
  readonly done: Promise<Outcome[]>;
  /** Requests finished so far. */
  finished(): number;
}

/** `total` requests of mixed kinds over `connections` concurrent callers. */
export function mixedTraffic(base: string, key: string, total: number, connections: number): Traffic {
  const out: Outcome[] = [];
  let next = 0;
  const worker = async () => {
    while (next < total) {
      const i = next++;
      const kind = KINDS[i % KINDS.length]!;
      const o = await one(base, key, kind, i);
      out.push(o);
      // Like a client that backs off: an outage does not use up the traffic, which resumes after it.
      if (!o.completed && kind !== 'provider-error' && kind !== 'midstream-error' && kind !== 'abort') await new Promise((r) => setTimeout(r, 1000));
    }
  };
  const done = Promise.all(Array.from({ length: connections }, worker)).then(() => out);
  return { done, finished: () => out.length };
}
