import type { TestGateway } from './gateway.js';
import { post } from './http.js';
import { until } from './until.js';

/**
 * Waits until the log lines of every request answered so far have reached the test (the
 * processes' `lines`): a marker request is sent, and its lines are awaited in Envoy's access
 * log and in the sidecar's log. Each process writes its lines in order, but they come through
 * pipes, and Envoy writes its access log about once a second (ENVOY_LOG_FLUSH): a fixed wait
 * after a request does not make its lines arrive on a stalled box. The marker may be served or
 * refused (both are logged). Returns the marker's request id.
 */
export async function logsCaughtUp(gw: TestGateway, timeoutMs = 10_000): Promise<string> {
  const r = await post(`${gw.base}/chat/completions`, { model: 'svc-core', max_tokens: 5, messages: [{ role: 'user', content: 'log marker' }] }, gw.key);
  const id = r.headers.get('x-request-id');
  if (!id) throw new Error(`the log marker request was answered ${r.status} without a request id: ${r.text.slice(0, 200)}`);
  await until(`the log lines of the marker request ${id}`, () => ['envoy', 'sidecar'].every((n) => gw.stack.process(n).lines.some((l) => l.includes(id))), timeoutMs);
  return id;
}
