/**
 * The account service's payment provider client over https, against a local
 * CA this test creates: a provider whose certificate chains to
 * `accountService.paymentsTls.customCaFile` and names the host is charged
 * (body and Idempotency-Key arrive); one from an untrusted CA or without the
 * expected name is refused at the handshake, so no request (no card token,
 * no amount) ever reaches its handler.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSecureContext } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { paymentsFromConfig } from '../../sidecar/account/payments/from-config.js';
import { PaymentUnavailableError, type ChargeInput } from '../../sidecar/account/payments/provider.js';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { mergeConfig, parseConfig } from '../../sidecar/src/config/load.js';
import { createLocalCa, type CertFiles, type LocalCa } from '../../sidecar/stack/dev-ca.js';

const dir = mkdtempSync(join(tmpdir(), 'payments-tls-'));
let trusted: LocalCa;
let server: CertFiles;
let rogueServer: CertFiles;
let https: Server;
let port = 0;
let cert = (): CertFiles => server;
let connections = 0;
const seen: Array<{ method: string; url: string; idempotencyKey: string | undefined; body: string }> = [];

const pemPair = (c: CertFiles) => ({ cert: readFileSync(c.certFile), key: readFileSync(c.keyFile) });

beforeAll(async () => {
  trusted = createLocalCa(join(dir, 'trusted'), 'payments test CA');
  const rogue = createLocalCa(join(dir, 'rogue'), 'untrusted CA');
  server = trusted.issue('payments', { names: ['localhost'], usage: 'server' });
  rogueServer = rogue.issue('payments', { names: ['localhost'], usage: 'server' });
  // The certificate served is chosen per connection (with SNI); without SNI (an IP URL) the trusted one.
  const options = { ...pemPair(server), SNICallback: (_n: string, cb: (e: Error | null, c: unknown) => void) => cb(null, createSecureContext(pemPair(cert()))) };
  https = createServer(options as never, (req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', idempotencyKey: req.headers['idempotency-key'] as string | undefined, body });
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ id: 'ch_tls_1', status: 'succeeded' }));
    });
  });
  https.on('connection', () => connections++);
  await new Promise<void>((r) => https.listen(0, '127.0.0.1', () => r()));
  port = (https.address() as { port: number }).port;
});
afterAll(async () => {
  https.closeAllConnections();
  await new Promise<void>((r) => https.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

const provider = (url: string, paymentsTls: Record<string, unknown>) => {
  const cfg = parseConfig(mergeConfig(defaultConfig('svc'), { accountService: { paymentsUrl: url, paymentsTls } }));
  return paymentsFromConfig(cfg)!;
};

const charge: ChargeInput = { token: 'tok_visa_tls', amount: 25_000_000, currency: 'usd', description: 'credits', idempotencyKey: 'idem-tls-1' };

describe('payment provider over https (accountService.paymentsTls)', () => {
  it('a provider whose certificate chains to the custom CA and names the host: charged, with the body and Idempotency-Key', async () => {
    cert = () => server;
    const before = seen.length;
    const p = provider(`https://localhost:${port}`, { customCaFile: trusted.certFile });
    expect(await p.charge(charge)).toEqual({ status: 'succeeded', chargeId: 'ch_tls_1' });
    expect(seen.slice(before)).toEqual([
      {
        method: 'POST',
        url: '/v1/charges',
        idempotencyKey: 'idem-tls-1',
        body: JSON.stringify({ token: 'tok_visa_tls', amount: 25_000_000, currency: 'usd', description: 'credits' }),
      },
    ]);
  });

  it.each([
    ['a certificate from an untrusted CA', () => rogueServer, 'https://localhost:PORT', { customCaFile: '<trusted>' }],
    ['the system bundle, which does not hold the test CA', () => server, 'https://localhost:PORT', {}],
    ['a certificate that does not name the host (127.0.0.1)', () => server, 'https://127.0.0.1:PORT', { customCaFile: '<trusted>' }],
  ])('%s: refused at the handshake, nothing reaches the handler', async (_what, which, url, tls) => {
    cert = which;
    const [before, connectionsBefore] = [seen.length, connections];
    const settings = Object.fromEntries(Object.entries(tls).map(([k, v]) => [k, v === '<trusted>' ? trusted.certFile : v]));
    const p = provider(url.replace('PORT', String(port)), settings);
    await expect(p.charge(charge)).rejects.toBeInstanceOf(PaymentUnavailableError);
    await expect(p.card('tok_visa_tls')).rejects.toBeInstanceOf(PaymentUnavailableError);
    expect(connections).toBeGreaterThan(connectionsBefore); // the server was reached: the refusal is the TLS check
    expect(seen.length).toBe(before);
  });

  it('calls share one verified connection; one left idle for 4 s is closed and the next call opens a new one', async () => {
    cert = () => server;
    const p = provider(`https://localhost:${port}`, { customCaFile: trusted.certFile });
    const [before, connectionsBefore] = [seen.length, connections];
    for (let i = 0; i < 3; i++) expect(await p.charge({ ...charge, idempotencyKey: `idem-reuse-${i}` })).toEqual({ status: 'succeeded', chargeId: 'ch_tls_1' });
    expect(seen.length - before).toBe(3);
    expect(connections - connectionsBefore).toBe(1);
    await new Promise((r) => setTimeout(r, 4_500));
    expect(await p.charge({ ...charge, idempotencyKey: 'idem-reuse-late' })).toEqual({ status: 'succeeded', chargeId: 'ch_tls_1' });
    expect(connections - connectionsBefore).toBe(2);
    expect(seen.length - before).toBe(4);
  });

  it('serverName names the expected host when the URL has an address', async () => {
    cert = () => server;
    const p = provider(`https://127.0.0.1:${port}`, { customCaFile: trusted.certFile, serverName: 'localhost' });
    expect(await p.charge(charge)).toEqual({ status: 'succeeded', chargeId: 'ch_tls_1' });
  });

  it('an unreadable CA file stops the start, naming the setting (not the file contents)', () => {
    expect(() => provider(`https://localhost:${port}`, { customCaFile: join(dir, 'missing.pem') })).toThrow(
      /^accountService\.paymentsTls\.customCaFile: cannot read .*missing\.pem \(ENOENT\)$/,
    );
  });

  it('the settings are validated with the config (unknown key, certificate without its key)', () => {
    expect(() => provider(`https://localhost:${port}`, { verify: false })).toThrow();
    expect(() => provider(`https://localhost:${port}`, { clientCertFile: server.certFile })).toThrow(/clientCertFile and clientKeyFile go together/);
  });
});
