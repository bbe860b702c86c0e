/**
 * Upstream TLS through real Envoy: the provider is the simulator serving
 * HTTPS with certificates from CAs this test creates (openssl). The provider
 * cluster must check the certificate's name, chain and validity before a byte
 * of the request (provider key, prompt) is written; a refused certificate is
 * the 502 upstream_error envelope and the simulator sees no request. Mutual
 * TLS with and without a client certificate; streaming over TLS is the same
 * as over plain HTTP.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSimulator, type Simulator } from '../../sidecar/simulator/server.js';
import { createLocalCa, type CertFiles, type LocalCa } from '../../sidecar/stack/dev-ca.js';
import { startGateway, type TestGateway } from '../harness/gateway.js';
import { expectEnvelope, expectNoLeak, post } from '../harness/http.js';
import { reservePort } from '../harness/ports.js';
import { readSse } from '../harness/sse.js';

const UPSTREAM_KEY = 'sk-provider-test-secret'; // what the harness gives the gateway as the provider key
const PROMPT = 'A confidential prompt for the provider';
const chat = (stream = false) => ({ model: 'svc-core', stream, messages: [{ role: 'user', content: PROMPT }] });
const DAY = 86_400_000;

const dir = mkdtempSync(join(tmpdir(), 'upstream-tls-'));
let trusted: LocalCa;
let clientCa: LocalCa;
const certs: Record<string, CertFiles> = {};

/** The HTTPS simulator currently on a port, replaced per scenario. */
let sim: Simulator | null = null;
/** The provider ports, held from the start until a simulator first listens on them (the gateways start in between). */
const held = new Map<number, () => Promise<void>>();
async function serve(port: number, cert: CertFiles, requireClientCertFrom: LocalCa | null = null, maxVersion?: 'TLSv1.2'): Promise<Simulator> {
  await sim?.close();
  await held.get(port)?.();
  sim = createSimulator({
    apiKey: UPSTREAM_KEY,
    tls: {
      cert: readFileSync(cert.certFile),
      key: readFileSync(cert.keyFile),
      clientCa: requireClientCertFrom ? readFileSync(requireClientCertFrom.certFile) : null,
      maxVersion,
    },
  });
  await sim.listen(port, '127.0.0.1');
  return sim;
}

// A: https://localhost:<port>, trusting only the test CA, no client certificate.
let gwA: TestGateway;
let portA = 0;
// B: https://127.0.0.1:<port> with serverName api.good.example, a client certificate and TLS 1.3 at least.
let gwB: TestGateway;
let portB = 0;
// C: the plain-HTTP gateway (simulator child process), for comparing streams.
let gwC: TestGateway;
// D: the local stack's one setting (SIMULATOR_TLS=1 npm start): the simulator child on HTTPS, a fresh local CA.
let gwD: TestGateway;

beforeAll(async () => {
  trusted = createLocalCa(join(dir, 'trusted'), 'test provider CA');
  const rogue = createLocalCa(join(dir, 'rogue'), 'untrusted CA');
  clientCa = createLocalCa(join(dir, 'clients'), 'provider client CA');
  certs.good = trusted.issue('localhost', { names: ['localhost'], usage: 'server' });
  certs.otherHost = trusted.issue('evil', { names: ['evil.example'], usage: 'server' });
  certs.untrusted = rogue.issue('localhost', { names: ['localhost'], usage: 'server' });
  certs.expired = trusted.issue('expired', { names: ['localhost'], usage: 'server', notBefore: new Date(Date.now() - 30 * DAY), notAfter: new Date(Date.now() - DAY) });
  certs.notYetValid = trusted.issue('future', { names: ['localhost'], usage: 'server', notBefore: new Date(Date.now() + DAY), notAfter: new Date(Date.now() + 30 * DAY) });
  certs.named = trusted.issue('named', { names: ['api.good.example'], usage: 'server' });
  certs.client = clientCa.issue('gateway', { names: ['svc-gateway'], usage: 'client' });

  const [a, b] = await Promise.all([reservePort(), reservePort()]);
  [portA, portB] = [a.port, b.port];
  held.set(portA, a.release).set(portB, b.release);
  // One after another: three stacks starting at once can starve each other on a small machine.
  gwA = await startGateway({
    simulator: false,
    config: { upstream: { baseUrl: `https://localhost:${portA}/v1`, tls: { customCaFile: trusted.certFile } } },
  });
  gwB = await startGateway({
    simulator: false,
    config: {
      upstream: {
        baseUrl: `https://127.0.0.1:${portB}/v1`,
        tls: {
          customCaFile: trusted.certFile,
          serverName: 'api.good.example',
          clientCertFile: certs.client.certFile,
          clientKeyFile: certs.client.keyFile,
          minVersion: '1.3',
        },
      },
    },
  });
  gwC = await startGateway();
  gwD = await startGateway({ simulatorTls: true });
});

/** Envoy's count of provider certificates refused for this reason (cluster.provider.ssl.<reason>). */
async function providerSslStat(gw: TestGateway, reason: string): Promise<number> {
  const text = await (await fetch(`${gw.stack.envoyAdminUrl}/stats?filter=^cluster\\.provider\\.ssl\\.${reason}$`)).text();
  const m = /: (\d+)/.exec(text);
  if (!m) throw new Error(`no stat cluster.provider.ssl.${reason} in: ${text}`);
  return Number(m[1]);
}

afterAll(async () => {
  await sim?.close();
  await Promise.all([...held.values()].map((release) => release()));
  await Promise.all([gwA?.stop(), gwB?.stop(), gwC?.stop(), gwD?.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

describe('the provider certificate is verified', () => {
  it('the right host, chained to the trusted CA: served, with SNI localhost and the provider key', async () => {
    const s = await serve(portA, certs.good!);
    const r = await post(`${gwA.base}/chat/completions`, chat(), gwA.key);
    expect(r.status, r.text).toBe(200);
    expect(r.json.choices[0].message.content.length).toBeGreaterThan(0);
    expect(s.stats.totalRequests).toBe(1);
    expect(s.stats.tls.serverNames).toEqual(['localhost']);
    expect(s.stats.tls.handshakes).toBeGreaterThanOrEqual(1);
    expect(s.stats.tls.versions).toEqual(['TLSv1.3']); // offered by the provider, so used
    expect(s.stats.lastRequest('/v1/chat/completions')?.headers.authorization).toBe(`Bearer ${UPSTREAM_KEY}`);
  });

  it.each([
    ['a certificate for another host', 'otherHost', 'fail_verify_san'],
    ['a certificate from an untrusted CA', 'untrusted', 'fail_verify_error'],
    ['an expired certificate', 'expired', 'fail_verify_error'],
    ['a certificate not valid yet', 'notYetValid', 'fail_verify_error'],
  ])('%s: 502 upstream_error, and nothing of the request reaches the connection', async (_what, which, reason) => {
    const refusedBefore = await providerSslStat(gwA, reason);
    const s = await serve(portA, certs[which]!);
    for (const stream of [false, true]) {
      const r = await post(`${gwA.base}/chat/completions`, chat(stream), gwA.key);
      expectEnvelope(r, 502, 'upstream_error', 'api_error');
      expectNoLeak(r, [UPSTREAM_KEY, 'sim-core-1']);
    }
    // Envoy did connect (and retried: a refused handshake is a connection failure) ...
    expect(s.stats.tls.connections).toBeGreaterThanOrEqual(2);
    // ... refused the certificate for the expected reason ...
    expect(await providerSslStat(gwA, reason)).toBeGreaterThan(refusedBefore);
    // ... and never finished a handshake, so no request, key or prompt was written.
    expect(s.stats.tls.handshakes).toBe(0);
    expect(s.stats.totalRequests).toBe(0);
    expect(s.stats.snapshot().authSeen.authorization).toEqual([]);
  });
});

describe('minimum TLS version', () => {
  it('TLS 1.2 is accepted by default (minVersion 1.2)', async () => {
    const s = await serve(portA, certs.good!, null, 'TLSv1.2');
    const r = await post(`${gwA.base}/chat/completions`, chat(), gwA.key);
    expect(r.status, r.text).toBe(200);
    expect(s.stats.totalRequests).toBe(1);
    expect(s.stats.tls.versions).toEqual(['TLSv1.2']);
  });

  it('minVersion 1.3: a provider offering at most TLS 1.2 is refused (502, no request)', async () => {
    const s = await serve(portB, certs.named!, clientCa, 'TLSv1.2');
    const r = await post(`${gwB.base}/chat/completions`, chat(), gwB.key);
    expectEnvelope(r, 502, 'upstream_error', 'api_error');
    expect(s.stats.tls.connections).toBeGreaterThanOrEqual(1);
    expect(s.stats.totalRequests).toBe(0);
  });
});

describe('mutual TLS', () => {
  it('with the client certificate: served; the certificate must name serverName (api.good.example), sent as SNI to an IP', async () => {
    const s = await serve(portB, certs.named!, clientCa);
    const r = await post(`${gwB.base}/chat/completions`, chat(), gwB.key);
    expect(r.status, r.text).toBe(200);
    expect(s.stats.totalRequests).toBe(1);
    expect(s.stats.tls.serverNames).toEqual(['api.good.example']);
    expect(s.stats.tls.versions).toEqual(['TLSv1.3']);
  });

  it('serverName is enforced too: a certificate for localhost at the same address is refused', async () => {
    const s = await serve(portB, certs.good!, clientCa);
    const r = await post(`${gwB.base}/chat/completions`, chat(), gwB.key);
    expectEnvelope(r, 502, 'upstream_error', 'api_error');
    expect(s.stats.totalRequests).toBe(0);
  });

  it('without a client certificate: the provider refuses the handshake, 502 upstream_error, no request', async () => {
    const s = await serve(portA, certs.good!, clientCa);
    const r = await post(`${gwA.base}/chat/completions`, chat(), gwA.key);
    expectEnvelope(r, 502, 'upstream_error', 'api_error');
    expect(s.stats.tls.connections).toBeGreaterThanOrEqual(1);
    expect(s.stats.totalRequests).toBe(0);
  });
});

describe('streaming over TLS', () => {
  /** The events with what differs per request (ids, timestamps) blanked. */
  const normalise = (events: string[]) =>
    events.map((e) => e.replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, '<id>').replace(/"created":\d+/g, '"created":0'));

  it('delivers exactly the events the plain-HTTP gateway delivers', async () => {
    const s = await serve(portA, certs.good!);
    s.config.chunkDelayMs = 5;
    const body = { ...chat(true), messages: [{ role: 'user', content: 'Hello #sim:tokens=12' }] };
    const overTls = await readSse(`${gwA.base}/chat/completions`, body, gwA.key);
    const plain = await readSse(`${gwC.base}/chat/completions`, body, gwC.key);
    expect(overTls.status).toBe(200);
    expect(plain.status).toBe(200);
    expect(overTls.error).toBeNull();
    expect(overTls.events.at(-1)).toBe('[DONE]');
    expect(overTls.events.length).toBeGreaterThan(12);
    expect(normalise(overTls.events)).toEqual(normalise(plain.events));
    expect(s.stats.snapshot().streams).toMatchObject({ started: 1, completed: 1 });
  });
});

describe('the local stack over HTTPS (SIMULATOR_TLS=1 npm start)', () => {
  it('serves through a verified TLS connection to the simulator', async () => {
    expect(gwD.config.upstream.baseUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+\/v1$/);
    expect(gwD.config.upstream.tls.customCaFile).toMatch(/dev-ca\/ca\.crt$/);
    const r = await post(`${gwD.base}/chat/completions`, chat(), gwD.key);
    expect(r.status, r.text).toBe(200);
    const stream = await readSse(`${gwD.base}/chat/completions`, chat(true), gwD.key);
    expect(stream.events.at(-1)).toBe('[DONE]');
    expect(await providerSslStat(gwD, 'handshake')).toBeGreaterThanOrEqual(1);
  });
});

describe('a TLS file the provider settings name but nobody can read', () => {
  it('stops the start with the setting named, before any process runs', async () => {
    await expect(
      startGateway({ simulator: false, config: { upstream: { baseUrl: 'https://localhost:1/v1', tls: { customCaFile: join(dir, 'missing-ca.pem') } } } }),
    ).rejects.toThrow(`upstream.tls.customCaFile: cannot read ${join(dir, 'missing-ca.pem')}`);
  });
});
