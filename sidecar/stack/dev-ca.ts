import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';
import { parseConfig } from '../src/config/load.js';
import type { Config } from '../src/config/schema.js';

/**
 * A local certificate authority made with the openssl CLI, for the local stack
 * (`SIMULATOR_TLS=1 npm start`) and the tests: a CA, server certificates for
 * given names (DNS or IP), client certificates for mutual TLS, and
 * certificates with chosen validity dates (an expired one, say). ECDSA P-256.
 */
export interface CertFiles {
  readonly certFile: string;
  readonly keyFile: string;
}

export interface LocalCa extends CertFiles {
  readonly dir: string;
  /**
   * Issues a certificate signed by this CA. `names`: DNS names or IP addresses
   * (subject alternative names; the first is also the common name).
   */
  issue(
    file: string,
    opts: { names: readonly string[]; usage: 'server' | 'client'; notBefore?: Date; notAfter?: Date },
  ): CertFiles;
}

const DAY_MS = 86_400_000;

function openssl(args: readonly string[], cwd: string): void {
  try {
    execFileSync('openssl', args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    const e = err as { stderr?: Buffer; code?: string };
    if (e.code === 'ENOENT') throw new Error('openssl not found on PATH (needed to create the local CA)');
    throw new Error(`openssl ${args[0]} failed: ${e.stderr?.toString().trim() ?? String(err)}`);
  }
}

/** openssl's UTCTime form, YYMMDDHHMMSSZ (valid through 2049). */
function asn1Time(d: Date): string {
  return d.toISOString().replace(/[-:T]/g, '').slice(2, 14) + 'Z';
}

const subject = (cn: string) => `/CN=${cn.replace(/[/\\=]/g, '_')}`;
const newKey = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

/** Creates a CA in `dir` (any earlier one there is replaced). */
export function createLocalCa(dir: string, name: string, validDays = 30): LocalCa {
  mkdirSync(join(dir, 'issued'), { recursive: true });
  const certFile = join(dir, 'ca.crt');
  const keyFile = join(dir, 'ca.key');
  openssl(
    ['req', '-x509', ...newKey, '-keyout', keyFile, '-out', certFile, '-subj', subject(name), '-days', String(validDays),
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign'],
    dir,
  );
  writeFileSync(join(dir, 'index.txt'), '');
  writeFileSync(
    join(dir, 'ca.cnf'),
    [
      '[ca]',
      'default_ca = local',
      '[local]',
      `database = ${join(dir, 'index.txt')}`,
      `new_certs_dir = ${join(dir, 'issued')}`,
      `certificate = ${certFile}`,
      `private_key = ${keyFile}`,
      'rand_serial = yes',
      'default_md = sha256',
      'unique_subject = no',
      'copy_extensions = none',
      'policy = any',
      '[any]',
      'commonName = supplied',
      '',
    ].join('\n'),
  );
  return {
    dir,
    certFile,
    keyFile,
    issue(file, opts) {
      const leafCert = join(dir, `${file}.crt`);
      const leafKey = join(dir, `${file}.key`);
      const csr = join(dir, `${file}.csr`);
      const ext = join(dir, `${file}.ext`);
      const first = opts.names[0];
      if (first === undefined) throw new Error('a certificate needs at least one name');
      const san = opts.names.map((n) => `${isIP(n) ? 'IP' : 'DNS'}:${n}`).join(',');
      writeFileSync(
        ext,
        [
          '[leaf]',
          'basicConstraints = critical,CA:FALSE',
          'keyUsage = critical,digitalSignature',
          `extendedKeyUsage = ${opts.usage === 'server' ? 'serverAuth' : 'clientAuth'}`,
          `subjectAltName = ${san}`,
          '',
        ].join('\n'),
      );
      openssl(['req', '-new', ...newKey, '-keyout', leafKey, '-out', csr, '-subj', subject(first)], dir);
      const notBefore = opts.notBefore ?? new Date(Date.now() - DAY_MS);
      const notAfter = opts.notAfter ?? new Date(Date.now() + validDays * DAY_MS);
      openssl(
        ['ca', '-batch', '-notext', '-config', join(dir, 'ca.cnf'), '-in', csr, '-out', leafCert,
          '-startdate', asn1Time(notBefore), '-enddate', asn1Time(notAfter), '-extfile', ext, '-extensions', 'leaf'],
        dir,
      );
      return { certFile: leafCert, keyFile: leafKey };
    },
  };
}

/**
 * The local stack with the simulator on HTTPS (`SIMULATOR_TLS=1 npm start`,
 * and the tests): a fresh CA in `dir`, a server certificate for localhost,
 * 127.0.0.1 and ::1, the upstream URL switched to https:// with that CA as
 * upstream.tls.customCaFile, and the simulator's certificate arguments.
 */
export function withHttpsSimulator(cfg: Config, dir: string): { config: Config; simulatorArgs: string[]; caFile: string } {
  const ca = createLocalCa(dir, 'svc local development CA');
  const server = ca.issue('simulator', { names: ['localhost', '127.0.0.1', '::1'], usage: 'server' });
  const url = new URL(cfg.upstream.baseUrl);
  url.protocol = 'https:';
  const config = parseConfig({
    ...cfg,
    upstream: { ...cfg.upstream, baseUrl: url.toString().replace(/\/$/, ''), tls: { ...cfg.upstream.tls, customCaFile: ca.certFile } },
  });
  return { config, simulatorArgs: ['--tls-cert', server.certFile, '--tls-key', server.keyFile], caFile: ca.certFile };
}
