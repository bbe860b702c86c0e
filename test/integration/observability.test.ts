import { sample } from '../harness/metrics.js';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../sidecar/stack/paths.js';
import { startGateway, type TestGateway } from '../harness/gateway.js';
import { call, post } from '../harness/http.js';
import { readSse } from '../harness/sse.js';
import { until } from '../harness/until.js';

/** Metrics on the operator port and Envoy's JSON access log, through the real topology (Redis store). */
let gw: TestGateway;
const INTERNAL = ['sim-quick-1', 'sim-core-1', 'sim-deep-r1', 'sim-embed-1'];

beforeAll(async () => {
  gw = await startGateway({ store: 'redis' });
});
afterAll(async () => {
  await gw?.stop();
});

const metricsText = async (token: string | null = gw.stack.adminToken) => {
  const res = await fetch(`${gw.stack.adminUrl}/metrics`, { headers: token ? { authorization: `Bearer ${token}` } : {} });
  return { status: res.status, type: res.headers.get('content-type'), text: await res.text() };
};


const jsonLines = (lines: readonly string[]) =>
  lines.flatMap((l) => {
    try {
      const v = JSON.parse(l);
      return v && typeof v === 'object' ? [v] : [];
    } catch {
      return [];
    }
  });

const waitFor = async <T>(get: () => T | undefined, what: string): Promise<T> => {
  // Envoy flushes its access log about once a second.
  for (let i = 0; i < 400; i++) {
    const v = get();
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
};
const envoyLine = (requestId: string) => waitFor(() => jsonLines(gw.stack.process('envoy').lines).find((l) => l.request_id === requestId), `Envoy's access-log line ${requestId}`);
const sidecarLine = (requestId: string) =>
  waitFor(() => jsonLines(gw.stack.process('sidecar').lines).find((l) => l.request_id === requestId && (l.msg === 'request' || l.msg === 'request refused')), `the sidecar's line ${requestId}`);

describe('Prometheus metrics (operator port, /metrics)', () => {
  it('needs the admin token like every operator endpoint', async () => {
    expect((await metricsText(null)).status).toBe(401);
    expect((await metricsText('not-the-admin-token-at-all')).status).toBe(401);
    const ok = await metricsText();
    expect(ok.status).toBe(200);
    expect(ok.type).toMatch(/^text\/plain/);
  });

  it('counts requests by route, alias, status and code; tokens by alias; phases; settlements; holds', async () => {
    const before = (await metricsText()).text;
    const chat = await post(`${gw.base}/chat/completions`, { model: 'svc-quick', max_tokens: 20, messages: [{ role: 'user', content: 'count me' }] }, gw.key);
    expect(chat.status).toBe(200);
    const stream = await readSse(`${gw.base}/chat/completions`, { model: 'svc-core', stream: true, max_tokens: 20, messages: [{ role: 'user', content: 'stream me' }] }, gw.key);
    expect(stream.status).toBe(200);
    expect((await post(`${gw.base}/chat/completions`, { model: 'nope', messages: [{ role: 'user', content: 'x' }] }, gw.key)).status).toBe(400);
    expect((await call(`${gw.base}/models`, { key: 'svc_pk_wrong' })).status).toBe(401);
    expect((await call(`${gw.base}/models`, { key: gw.key })).status).toBe(200);

    // The settlement runs after the response; wait until it is counted.
    let after = '';
    const settled = () => sample(after, 'gateway_settlements_total', { op: 'settle', result: 'applied' }) - sample(before, 'gateway_settlements_total', { op: 'settle', result: 'applied' });
    await until('both settlements counted', async () => ((after = (await metricsText()).text), settled() >= 2), 10_000).catch(() => {});
    const delta = (name: string, labels: Record<string, string>) => sample(after, name, labels) - sample(before, name, labels);
    expect(delta('gateway_requests_total', { route: 'chat', alias: 'svc-quick', status: '200', code: '' })).toBe(1);
    expect(delta('gateway_requests_total', { route: 'chat', alias: 'svc-core', status: '200', code: '' })).toBe(1);
    expect(delta('gateway_requests_total', { route: 'chat', alias: '', status: '400', code: 'SRV_001' })).toBe(1);
    expect(delta('gateway_requests_total', { route: 'models', alias: '', status: '401', code: 'invalid_api_key' })).toBe(1);
    expect(delta('gateway_requests_total', { route: 'models', alias: '', status: '200', code: '' })).toBe(1);
    expect(delta('gateway_tokens_total', { alias: 'svc-quick', direction: 'in' })).toBe(chat.json.usage.prompt_tokens);
    expect(delta('gateway_tokens_total', { alias: 'svc-quick', direction: 'out' })).toBe(chat.json.usage.completion_tokens);
    expect(delta('gateway_tokens_total', { alias: 'svc-core', direction: 'out' })).toBeGreaterThan(0);
    expect(delta('gateway_settlements_total', { op: 'settle', result: 'applied' })).toBe(2);
    for (const phase of ['authorization', 'request', 'response', 'end_to_end']) {
      expect(delta('gateway_phase_duration_seconds_count', { phase }), phase).toBeGreaterThanOrEqual(2);
    }
    expect(delta('gateway_phase_duration_seconds_count', { phase: 'first_event' })).toBe(1);
    expect(sample(after, 'gateway_credit_holds_open')).toBe(0);
    expect(sample(after, 'gateway_credit_held_micro')).toBe(0);
    expect(sample(after, 'gateway_store_operation_duration_seconds_count', { store: 'ledger', result: 'ok' })).toBeGreaterThan(0);
    expect(sample(after, 'gateway_build_info', { version: '0.1.0' })).toBe(1);
    expect(sample(after, 'gateway_store_up', { store: 'keys' })).toBe(1);
    expect(sample(after, 'gateway_store_up', { store: 'ledger' })).toBe(1);
    // No tenant or key id, no credential, no internal model anywhere in the exposition.
    for (const secret of [gw.tenantId, gw.key, gw.upstreamKey, gw.stack.adminToken, 'tenant_id', 'key_id', ...INTERNAL]) expect(after).not.toContain(secret);
  });

  it('a request the sidecar refused in ext_authz is counted once, not again by ext_proc', async () => {
    const before = (await metricsText()).text;
    expect((await call(`${gw.base}/whoami`)).status).toBe(401);
    const after = (await metricsText()).text;
    expect(sample(after, 'gateway_requests_total', { route: 'whoami', status: '401', code: 'invalid_api_key' }) - sample(before, 'gateway_requests_total', { route: 'whoami', status: '401', code: 'invalid_api_key' })).toBe(1);
  });
});

describe("Envoy's access log (JSON lines)", () => {
  it('one line per request: request id, route, status, durations, principal ids, alias and tokens; the same request id as the sidecar line', async () => {
    const r = await post(`${gw.base}/chat/completions`, { model: 'svc-quick', max_tokens: 20, messages: [{ role: 'user', content: 'log me' }] }, gw.key);
    expect(r.status).toBe(200);
    const id = r.headers.get('x-request-id') as string;
    const line = await envoyLine(id);
    const side = await sidecarLine(id);
    expect(line).toMatchObject({
      request_id: id,
      route: 'chat_buffer',
      status: 200,
      tenant_id: gw.tenantId,
      alias: 'svc-quick',
      outcome: 'ok',
      prompt_tokens: r.json.usage.prompt_tokens,
      completion_tokens: r.json.usage.completion_tokens,
      auth_method: 'api_key',
    });
    expect(line.key_id).toMatch(/^key_/);
    expect(side).toMatchObject({ request_id: id, tenant_id: gw.tenantId, key_id: line.key_id, alias: 'svc-quick', status: 200 });
    for (const f of ['duration_ms', 'request_ms', 'first_byte_ms', 'response_tx_ms']) expect(typeof line[f], f).toBe('number');
  });

  it('a streamed response: its route and token counts; a refusal: principal-free and alias-free', async () => {
    const res = await readSse(`${gw.base}/chat/completions`, { model: 'svc-core', stream: true, max_tokens: 20, messages: [{ role: 'user', content: 'stream log' }] }, gw.key);
    expect(res.status).toBe(200);
    const id = res.headers.get('x-request-id') as string;
    const line = await envoyLine(id);
    expect(line).toMatchObject({ route: 'chat_stream', status: 200, alias: 'svc-core', outcome: 'ok' });
    expect(line.completion_tokens).toBeGreaterThan(0);

    const refused = await call(`${gw.base}/models`, { key: 'svc_pk_wrong' });
    const rl = await envoyLine(refused.headers.get('x-request-id') as string);
    expect(rl).toMatchObject({ route: 'models', status: 401, tenant_id: null, alias: null });
  });

  it('never carries a key, the provider key or prompt text', async () => {
    const r = await post(`${gw.base}/chat/completions`, { model: 'svc-quick', max_tokens: 5, messages: [{ role: 'user', content: 'secret-prompt-words' }] }, gw.key);
    await envoyLine(r.headers.get('x-request-id') as string);
    const all = gw.stack.process('envoy').lines.join('\n');
    for (const s of [gw.key, gw.upstreamKey, 'secret-prompt-words', ...INTERNAL]) expect(all).not.toContain(s);
  });
});

describe('the committed dashboard and alert rules', () => {
  const dir = join(REPO_ROOT, 'deploy', 'observability');
  const dashboard = JSON.parse(readFileSync(join(dir, 'grafana-dashboard.json'), 'utf8'));
  const rules = parseYaml(readFileSync(join(dir, 'alerts.yaml'), 'utf8'));
  const exprs: string[] = [
    ...dashboard.panels.flatMap((p: { targets: { expr: string }[] }) => p.targets.map((t) => t.expr)),
    ...rules.groups.flatMap((g: { rules: { expr: string }[] }) => g.rules.map((r) => r.expr)),
  ];
  const used = [...new Set(exprs.flatMap((e) => [...e.matchAll(/\b((?:gateway|envoy)_[a-z0-9_]+)\b(?!\s*[=!])/g)].map((m) => m[1] as string)))];
  const exported = (text: string) => new Set(text.split('\n').filter((l) => l && !l.startsWith('#')).map((l) => l.split(/[{ ]/, 1)[0]));

  it('are well formed: every rule has a name, an expression and a severity', () => {
    expect(used.length).toBeGreaterThan(15);
    for (const g of rules.groups) for (const r of g.rules) expect(r, JSON.stringify(r)).toMatchObject({ alert: expect.any(String), expr: expect.any(String), labels: { severity: expect.any(String) } });
    const alerts = rules.groups.flatMap((g: { rules: { alert: string }[] }) => g.rules.map((r) => r.alert));
    for (const a of ['GatewayStoreUnreachable', 'GatewaySettlementJournalGrowing', 'GatewaySidecarErrors', 'EnvoyExtAuthzFailures', 'EnvoyExtProcFailures', 'ProviderServerErrors']) expect(alerts).toContain(a);
  });

  it('use only metrics that the sidecar (gateway_*) or this real Envoy (envoy_*) exports', async () => {
    const sidecar = exported((await metricsText()).text);
    const envoy = exported(await (await fetch(`${gw.stack.envoyAdminUrl}/stats/prometheus`)).text());
    const missing = used.filter((m) => !(m.startsWith('gateway_') ? sidecar : envoy).has(m));
    expect(missing).toEqual([]);
  });
});

describe("the container hooks that talk to Envoy's admin (no curl in the Envoy image: bash /dev/tcp)", () => {
  const onThisEnvoy = (cmd: string) => cmd.replaceAll('127.0.0.1/9901', `127.0.0.1/${new URL(gw.stack.envoyAdminUrl).port}`);
  const run = (script: string, env: Record<string, string> = {}) => {
    try {
      return { code: 0, out: execFileSync('bash', ['-c', script], { encoding: 'utf8', env: { ...process.env, ...env } }) };
    } catch (err) {
      return { code: (err as { status: number }).status, out: '' };
    }
  };

  it("docker-compose's Envoy health check passes against a serving Envoy and fails where none listens", () => {
    const compose = parseYaml(readFileSync(join(REPO_ROOT, 'docker-compose.yml'), 'utf8'), { merge: true });
    const [kind, shell, flag, script] = compose.services.envoy.healthcheck.test as string[];
    expect([kind, shell, flag]).toEqual(['CMD', 'bash', '-c']);
    expect(run(onThisEnvoy(script as string)).code).toBe(0);
    expect(run((script as string).replace('127.0.0.1/9901', '127.0.0.1/1')).code).not.toBe(0);
  });

  it("the Kubernetes preStop hook starts Envoy's graceful drain, then waits (run last: it drains this gateway)", async () => {
    const dep = parseAllDocuments(readFileSync(join(REPO_ROOT, 'deploy', 'k8s', 'base', 'gateway-deployment.yaml'), 'utf8'))[0]!.toJSON();
    const envoy = dep.spec.template.spec.containers.find((c: { name: string }) => c.name === 'envoy');
    const [shell, flag, script] = envoy.lifecycle.preStop.exec.command as string[];
    expect([shell, flag]).toEqual(['bash', '-c']);
    const hook = run(onThisEnvoy(script as string), { STREAM_DRAIN_SECONDS: '0' });
    expect(hook.code).toBe(0);
    expect(hook.out).toMatch(/^HTTP\/1\.1 200 /); // Envoy accepted the drain
    // Draining, Envoy still serves requests (streams in flight finish; the listener stops after --drain-time-s).
    expect((await call(`${gw.base}/models`, { key: gw.key })).status).toBe(200);
  });
});
