/**
 * Outbound TLS settings: validated at start (upstream, identity, store), and
 * rendered into Envoy's provider cluster so that the certificate's chain,
 * validity and name are all checked.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { ConfigError, loadConfig, mergeConfig, parseConfig } from '../../sidecar/src/config/load.js';
import { SYSTEM_CA_BUNDLE } from '../../sidecar/src/config/outbound-tls.js';
import { redisClientOptions } from '../../sidecar/src/store/redis-client-options.js';
import { buildEnvoyBootstrap } from '../../sidecar/stack/envoy-config.js';
import { requireUpstreamTlsFiles } from '../../sidecar/stack/stack.js';

const dir = mkdtempSync(join(tmpdir(), 'tls-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const config = (over: Record<string, unknown>) => parseConfig(mergeConfig(defaultConfig('svc'), over));

function problemsOf(over: Record<string, unknown>): readonly string[] {
  try {
    config(over);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as ConfigError).problems;
  }
  throw new Error('expected a ConfigError');
}

type Plain = Record<string, any>;
function envoyCluster(name: string, over: Record<string, unknown>): Plain {
  const boot = buildEnvoyBootstrap(config(over)) as Plain;
  return boot.static_resources.clusters.find((c: Plain) => c.name === name);
}
const providerCluster = (over: Record<string, unknown>): Plain => envoyCluster('provider', over);

/** The TLS context Envoy gets for a cluster verified with a custom CA and a DNS name, presenting a client certificate. */
function verifiedContext(o: { min: string; cert: string; key: string; ca: string; name: string }) {
  return {
    tls_params: { tls_minimum_protocol_version: o.min, tls_maximum_protocol_version: 'TLSv1_3' },
    tls_certificates: [{ certificate_chain: { filename: o.cert }, private_key: { filename: o.key } }],
    validation_context: { trusted_ca: { filename: o.ca }, match_typed_subject_alt_names: [{ san_type: 'DNS', matcher: { exact: o.name } }] },
  };
}

describe('outbound TLS settings', () => {
  it('default to the system bundle, TLS 1.2 or later, the URL host and no client certificate, for every outbound connection', () => {
    const cfg = config({});
    const expected = { caBundleFile: SYSTEM_CA_BUNDLE, customCaFile: null, clientCertFile: null, clientKeyFile: null, serverName: null, minVersion: '1.2' };
    expect(cfg.upstream.tls).toEqual(expected);
    expect(cfg.identity.tls).toEqual(expected);
    expect(cfg.accountService.tls).toEqual(expected);
    const redis = config({ store: { kind: 'redis', url: 'rediss://r:6380' } });
    expect(redis.store).toEqual({ kind: 'redis', url: 'rediss://r:6380', username: null, passwordFile: null, passwordEnv: 'REDIS_PASSWORD', tls: expected });
  });

  it('refuses a client certificate without its key, an unknown TLS version, a server name that is not a host name, and unknown keys, all at once', () => {
    const problems = problemsOf({
      upstream: { tls: { clientCertFile: '/c.pem', minVersion: '1.1', serverName: 'api example', verify: false } },
      identity: { tls: { clientKeyFile: '/k.pem' } },
    });
    expect(problems.join('\n')).toMatch(/upstream\.tls.*(minVersion|serverName|verify)/);
    for (const key of ['minVersion', 'serverName']) expect(problems.some((p) => p.startsWith(`upstream.tls.${key}`)), key).toBe(true);
    expect(problems.some((p) => p.startsWith('upstream.tls') && /verify/.test(p))).toBe(true);
    expect(problems.some((p) => p.startsWith('identity.tls.clientKeyFile') && /both or neither/.test(p))).toBe(true);
    const lone = problemsOf({ upstream: { tls: { clientCertFile: '/c.pem' } } });
    expect(lone).toEqual(['upstream.tls.clientKeyFile: clientCertFile and clientKeyFile go together (both or neither)']);
  });

  it('a JWKS URL must be https unless it is on a loopback address', () => {
    expect(problemsOf({ identity: { jwksUrl: 'http://idp.example.com/jwks.json' } })).toEqual([
      'identity.jwksUrl: must be https:// (plain http only on a loopback address)',
    ]);
    expect(config({ identity: { jwksUrl: 'http://127.0.0.1:9/jwks.json' } }).identity.jwksUrl).toBe('http://127.0.0.1:9/jwks.json');
    expect(config({ identity: { jwksUrl: 'https://idp.example.com/jwks.json' } }).identity.jwksUrl).toBe('https://idp.example.com/jwks.json');
  });

  it("REDIS_URL switches the store to Redis and keeps the file's TLS and password settings", () => {
    const path = join(dir, 'redis.yaml');
    writeFileSync(path, 'store:\n  kind: memory\n  username: gw\n  passwordFile: /run/secrets/redis\n  tls:\n    customCaFile: /etc/redis-ca.pem\n');
    const cfg = loadConfig({ path, env: { REDIS_URL: 'rediss://r:6380' } });
    expect(cfg.store).toMatchObject({ kind: 'redis', url: 'rediss://r:6380', username: 'gw', passwordFile: '/run/secrets/redis', tls: { customCaFile: '/etc/redis-ca.pem' } });
  });
});

describe('Redis client options', () => {
  it('take the ACL user, the password from a file (wins) or the environment, and TLS only for rediss://', () => {
    const pw = join(dir, 'redis-password');
    writeFileSync(pw, 'from-file\n');
    const plain = config({ store: { kind: 'redis', url: 'redis://r:6379', username: 'gw' } });
    expect(redisClientOptions(plain.store as any, { REDIS_PASSWORD: 'from-env' })).toEqual({ username: 'gw', password: 'from-env' });
    const filed = config({ store: { kind: 'redis', url: 'redis://r:6379', passwordFile: pw } });
    expect(redisClientOptions(filed.store as any, { REDIS_PASSWORD: 'from-env' })).toEqual({ password: 'from-file' });
    const ca = join(dir, 'ca.pem');
    writeFileSync(ca, 'PEM');
    const tls = config({ store: { kind: 'redis', url: 'rediss://redis.internal:6380', tls: { customCaFile: ca } } });
    const opts = redisClientOptions(tls.store as any, {});
    expect(opts.tls).toMatchObject({ servername: 'redis.internal', rejectUnauthorized: true, minVersion: 'TLSv1.2' });
    expect(String((opts.tls as { ca: Buffer }).ca)).toBe('PEM');
  });

  it('an unreadable password or CA file is an error naming the setting', () => {
    const missing = config({ store: { kind: 'redis', url: 'redis://r:6379', passwordFile: join(dir, 'nope') } });
    expect(() => redisClientOptions(missing.store as any, {})).toThrow(/^store\.passwordFile: cannot read .*nope \(ENOENT\)$/);
    const noCa = config({ store: { kind: 'redis', url: 'rediss://r:6380', tls: { customCaFile: join(dir, 'no-ca') } } });
    expect(() => redisClientOptions(noCa.store as any, {})).toThrow(/^store\.tls\.customCaFile: cannot read/);
  });
});

describe("Envoy's provider cluster", () => {
  it('plain http: no TLS at all', () => {
    expect(providerCluster({}).transport_socket).toBeUndefined();
  });

  it('https: SNI and a DNS subject alternative name equal to the host, the system bundle, TLS 1.2 minimum', () => {
    const ctx = providerCluster({ upstream: { baseUrl: 'https://api.provider.example/v1' } }).transport_socket.typed_config;
    expect(ctx.sni).toBe('api.provider.example');
    expect(ctx.common_tls_context).toEqual({
      tls_params: { tls_minimum_protocol_version: 'TLSv1_2', tls_maximum_protocol_version: 'TLSv1_3' },
      validation_context: {
        trusted_ca: { filename: SYSTEM_CA_BUNDLE },
        match_typed_subject_alt_names: [{ san_type: 'DNS', matcher: { exact: 'api.provider.example' } }],
      },
    });
  });

  it('https to an IP: no SNI, an IP subject alternative name; serverName overrides both; custom CA, client certificate and TLS 1.3', () => {
    const ip = providerCluster({ upstream: { baseUrl: 'https://10.0.0.7:8443/v1' } }).transport_socket.typed_config;
    expect(ip.sni).toBeUndefined();
    expect(ip.common_tls_context.validation_context.match_typed_subject_alt_names).toEqual([{ san_type: 'IP_ADDRESS', matcher: { exact: '10.0.0.7' } }]);
    const named = providerCluster({
      upstream: {
        baseUrl: 'https://10.0.0.7:8443/v1',
        tls: { serverName: 'llm.internal', customCaFile: '/ca.pem', clientCertFile: '/c.pem', clientKeyFile: '/k.pem', minVersion: '1.3' },
      },
    }).transport_socket.typed_config;
    expect(named.sni).toBe('llm.internal');
    expect(named.common_tls_context).toEqual(verifiedContext({ min: 'TLSv1_3', cert: '/c.pem', key: '/k.pem', ca: '/ca.pem', name: 'llm.internal' }));
  });
});

describe("Envoy's account service cluster", () => {
  it('plain http: no TLS; https: verified with accountService.tls (custom CA, name, client certificate), not with upstream.tls', () => {
    expect(envoyCluster('account', {}).transport_socket).toBeUndefined();
    const ctx = envoyCluster('account', {
      upstream: { baseUrl: 'https://api.provider.example/v1', tls: { customCaFile: '/provider-ca.pem' } },
      accountService: {
        url: 'https://10.0.0.9:8443',
        tls: { serverName: 'accounts.internal', customCaFile: '/accounts-ca.pem', clientCertFile: '/gw.pem', clientKeyFile: '/gw-key.pem' },
      },
    }).transport_socket.typed_config;
    expect(ctx.sni).toBe('accounts.internal');
    expect(ctx.common_tls_context).toEqual(verifiedContext({ min: 'TLSv1_2', cert: '/gw.pem', key: '/gw-key.pem', ca: '/accounts-ca.pem', name: 'accounts.internal' }));
  });

  it('a TLS file Envoy would not find stops the start, naming the setting; an http:// account service needs none', () => {
    const missing = join(dir, 'missing-accounts-ca.pem');
    const cfg = config({ accountService: { url: 'https://accounts.internal:8443', tls: { customCaFile: missing } } });
    expect(() => requireUpstreamTlsFiles(cfg)).toThrow(`accountService.tls.customCaFile: cannot read ${missing}`);
    expect(() => requireUpstreamTlsFiles(config({ accountService: { url: 'http://accounts.internal:8081', tls: { customCaFile: missing } } }))).not.toThrow();
  });

  it('refuses a client certificate without its key there too, naming the setting', () => {
    expect(problemsOf({ accountService: { url: 'https://a.example', tls: { clientCertFile: '/c.pem' } } }).some((p) => p.startsWith('accountService.tls'))).toBe(true);
  });
});
