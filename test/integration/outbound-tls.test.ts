/**
 * The sidecar's own outbound TLS: the identity provider's JWKS URL and Redis
 * (`rediss://`, ACL user, password from a file or the environment), each
 * against a local CA this test creates. A server the settings do not trust
 * (unknown CA, a certificate without the expected name, no client
 * certificate where one is required) is never used.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSecureContext } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jsonFetcher } from '../../sidecar/src/adapters/outbound-tls.js';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { mergeConfig, parseConfig } from '../../sidecar/src/config/load.js';
import { OutboundTlsSchema } from '../../sidecar/src/config/outbound-tls.js';
import { SessionVerifier } from '../../sidecar/src/domain/auth/sessions.js';
import { StoreUnavailableError } from '../../sidecar/src/store/contract.js';
import { createKeyEvents } from '../../sidecar/src/store/key-events.js';
import { createRedisStore } from '../../sidecar/src/store/redis.js';
import { redisClientOptions } from '../../sidecar/src/store/redis-client-options.js';
import { createLocalCa, type CertFiles, type LocalCa } from '../../sidecar/stack/dev-ca.js';
import { DEV_AUDIENCE, DEV_ISSUER, ensureDevIdentity, mintSession } from '../../sidecar/stack/dev-idp.js';
import { startRedis, type RedisServer } from '../harness/redis.js';

const dir = mkdtempSync(join(tmpdir(), 'outbound-tls-'));
let trusted: LocalCa;
let rogue: LocalCa;
let clients: LocalCa;
let server: CertFiles;
let rogueServer: CertFiles;
let client: CertFiles;

beforeAll(() => {
  trusted = createLocalCa(join(dir, 'trusted'), 'test CA');
  rogue = createLocalCa(join(dir, 'rogue'), 'untrusted CA');
  clients = createLocalCa(join(dir, 'clients'), 'client CA');
  server = trusted.issue('server', { names: ['localhost'], usage: 'server' });
  rogueServer = rogue.issue('server', { names: ['localhost'], usage: 'server' });
  client = clients.issue('gateway', { names: ['svc-gateway'], usage: 'client' });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('JWKS URL over https', () => {
  let https: Server;
  let port = 0;
  let fetches = 0;
  let cert = (): CertFiles => server;
  let token = '';

  beforeAll(async () => {
    const idp = await ensureDevIdentity(join(dir, 'idp'));
    token = await mintSession(idp.privateJwkFile, { userId: 'usr_1', workspaces: ['ten_1'] });
    const jwks = readFileSync(idp.jwksFile);
    // The certificate served is chosen per connection (with SNI); without SNI (an IP URL) the trusted one.
    const options = { ...pemPair(server), SNICallback: (_name: string, cb: (e: Error | null, c: unknown) => void) => cb(null, createSecureContext(pemPair(cert()))) };
    https = createServer(options as never, (_req, res) => {
      fetches++;
      res.setHeader('content-type', 'application/json');
      res.end(jwks);
    });
    await new Promise<void>((r) => https.listen(0, '127.0.0.1', () => r()));
    port = (https.address() as { port: number }).port;
  });
  afterAll(() => new Promise<void>((r) => https.close(() => r())));

  const verifier = (url: string, tls: Record<string, unknown>) =>
    new SessionVerifier({
      ...parseConfig(defaultConfig('svc')).identity,
      issuer: DEV_ISSUER,
      audience: DEV_AUDIENCE,
      jwksUrl: url,
      fetchJson: jsonFetcher(url, OutboundTlsSchema.parse(tls), 'identity.tls'),
    });

  it('a server whose certificate chains to the custom CA and names the host: keys loaded, sessions verify', async () => {
    cert = () => server;
    const v = verifier(`https://localhost:${port}/jwks.json`, { customCaFile: trusted.certFile });
    expect(await v.verify(token)).toMatchObject({ userId: 'usr_1' });
    expect(v.status()).toMatchObject({ source: 'url', keys_loaded: 1, last_refresh_ok: true });
  });

  it.each([
    ['a certificate from an untrusted CA', () => rogueServer, `https://localhost:PORT/jwks.json`, { customCaFile: '<trusted>' }],
    ['the system bundle, which does not hold the test CA', () => server, `https://localhost:PORT/jwks.json`, {}],
    ['a certificate that does not name the host (127.0.0.1)', () => server, `https://127.0.0.1:PORT/jwks.json`, { customCaFile: '<trusted>' }],
  ])('%s: no keys, no session, nothing fetched', async (_what, which, url, tls) => {
    cert = which;
    const before = fetches;
    const settings = Object.fromEntries(Object.entries(tls).map(([k, v]) => [k, v === '<trusted>' ? trusted.certFile : v]));
    const v = verifier(url.replace('PORT', String(port)), settings);
    expect(await v.verify(token)).toBeNull();
    expect(v.status()).toMatchObject({ keys_loaded: 0, last_refresh_ok: false });
    expect(fetches).toBe(before);
  });

  it('serverName names the expected host when the URL has an address', async () => {
    cert = () => server;
    const v = verifier(`https://127.0.0.1:${port}/jwks.json`, { customCaFile: trusted.certFile, serverName: 'localhost' });
    expect(await v.verify(token)).toMatchObject({ userId: 'usr_1' });
  });
});

describe('Redis over TLS (rediss://) with an ACL user', () => {
  const password = 'redis-test-password-7f3a';
  let plain: RedisServer; // TLS, no client certificate required
  let mutual: RedisServer; // TLS, client certificate required
  let passwordFile = '';

  beforeAll(async () => {
    passwordFile = join(dir, 'redis-password');
    writeFileSync(passwordFile, `${password}\n`, { mode: 0o600 });
    const tls = { certFile: server.certFile, keyFile: server.keyFile, caFile: clients.certFile };
    [plain, mutual] = await Promise.all([
      startRedis({ tls: { ...tls, requireClientCert: false }, user: { name: 'gateway', password } }),
      startRedis({ tls: { ...tls, requireClientCert: true }, user: { name: 'gateway', password } }),
    ]);
  });
  afterAll(async () => {
    await Promise.all([plain?.stop(), mutual?.stop()]);
  });

  /** A store built the way the sidecar builds it: config validated, then client options from it. */
  function storeFor(url: string, store: Record<string, unknown>, env: Record<string, string> = {}) {
    const cfg = parseConfig(mergeConfig(defaultConfig('svc'), { store: { kind: 'redis', url, username: 'gateway', ...store } }));
    if (cfg.store.kind !== 'redis') throw new Error('not redis');
    const prefix = `t${Math.random().toString(36).slice(2, 8)}`;
    // Generous deadlines: a TLS connection set up on a stalled box must not look refused (a refusal is an error, not a timeout).
    return createRedisStore({ url, prefix, client: redisClientOptions(cfg.store, env), connectTimeoutMs: 10_000, commandTimeoutMs: 10_000 });
  }

  async function works(store: ReturnType<typeof storeFor>): Promise<void> {
    try {
      await store.createTenant({ id: 'ten_tls', name: 'tls', createdAt: new Date().toISOString() } as never);
      expect(await store.getTenant('ten_tls')).toMatchObject({ id: 'ten_tls' });
    } finally {
      await store.close();
    }
  }

  async function refused(store: ReturnType<typeof storeFor>): Promise<void> {
    try {
      await expect(store.ping()).rejects.toBeInstanceOf(StoreUnavailableError);
    } finally {
      await store.close();
    }
  }

  const url = (r: RedisServer) => `rediss://127.0.0.1:${r.port}`;
  const trust = () => ({ customCaFile: trusted.certFile, serverName: 'localhost' });

  it('the trusted CA, the expected name and the password from a file: the store works', async () => {
    await works(storeFor(url(plain), { passwordFile, tls: trust() }));
  });

  it('the password from the environment (REDIS_PASSWORD) works the same', async () => {
    await works(storeFor(url(plain), { tls: trust() }, { REDIS_PASSWORD: password }));
  });

  it('a wrong password is refused (store unavailable)', async () => {
    await refused(storeFor(url(plain), { tls: trust() }, { REDIS_PASSWORD: 'wrong' }));
  });

  it('an untrusted CA, or a certificate without the expected name, is refused before AUTH is sent', async () => {
    await refused(storeFor(url(plain), { passwordFile, tls: { customCaFile: rogue.certFile, serverName: 'localhost' } }));
    await refused(storeFor(url(plain), { passwordFile, tls: { customCaFile: trusted.certFile } })); // 127.0.0.1 is not in the certificate
    await refused(storeFor(url(plain), { passwordFile, tls: {} })); // the system bundle
  });

  it('key revocation events (pub/sub) travel over the same verified connection settings', async () => {
    const cfg = parseConfig(
      mergeConfig(defaultConfig('svc'), { store: { kind: 'redis', url: url(plain), username: 'gateway', passwordFile, tls: trust() } }),
    );
    const [a, b] = [createKeyEvents(cfg), createKeyEvents(cfg)];
    const heard: Array<string | null> = [];
    b.subscribe((h) => heard.push(h));
    try {
      for (let i = 0; i < 50 && !heard.includes('hash-1'); i++) {
        await a.publish('hash-1').catch(() => {});
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(heard).toContain('hash-1');
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('a server requiring a client certificate: refused without one, works with one', async () => {
    await refused(storeFor(url(mutual), { passwordFile, tls: trust() }));
    await works(storeFor(url(mutual), { passwordFile, tls: { ...trust(), clientCertFile: client.certFile, clientKeyFile: client.keyFile } }));
  });
});

const pemPair = (cert: CertFiles) => ({ cert: readFileSync(cert.certFile), key: readFileSync(cert.keyFile) });
