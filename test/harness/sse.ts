/** A raw SSE reader for tests: every `data:` payload in arrival order, with arrival times. */
export interface SseRead {
  status: number;
  headers: Headers;
  events: string[];
  /** ms since the request was sent, per event. */
  times: number[];
  /** Set when the stream broke off without a clean end. */
  error: string | null;
  raw: string;
}

export async function readSse(
  url: string,
  body: unknown,
  key: string,
  opts: { abortAfterEvents?: number; abortAfterMs?: number; timeoutMs?: number; onEvent?: (event: string) => void } = {},
): Promise<SseRead> {
  const started = performance.now();
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(new Error('timeout')), opts.timeoutMs ?? 20_000);
  const leave = opts.abortAfterMs === undefined ? null : setTimeout(() => ctrl.abort(new Error('client went away')), opts.abortAfterMs);
  const out: SseRead = { status: 0, headers: new Headers(), events: [], times: [], error: null, raw: '' };
  try {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': key },
      body: JSON.stringify(body),
      signal: ctrl.signal,
    });
    out.status = res.status;
    out.headers = res.headers;
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const text = decoder.decode(value, { stream: true });
      out.raw += text;
      buf += text;
      let i: number;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, i);
        buf = buf.slice(i + 2);
        for (const line of event.split('\n')) {
          if (line.startsWith('data: ')) {
            out.events.push(line.slice(6));
            out.times.push(performance.now() - started);
            opts.onEvent?.(line.slice(6));
          }
        }
      }
      if (opts.abortAfterEvents !== undefined && out.events.length >= opts.abortAfterEvents) {
        ctrl.abort(new Error('client went away'));
        break;
      }
    }
  } catch (err) {
    out.error = (err as Error).message;
  } finally {
    clearTimeout(timer);
    if (leave) clearTimeout(leave);
  }
  return out;
}
