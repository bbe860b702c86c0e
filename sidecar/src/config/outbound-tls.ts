import { isIP } from 'node:net';
import { z } from 'zod';

/**
 * How the project connects out over TLS, one shape for every outbound
 * connection: the provider (through Envoy), the identity provider's JWKS URL,
 * Redis (`rediss://`) and the account service's payment provider.
 *
 * The peer's certificate must chain to a trusted CA, be within its validity
 * period and name the host connected to (or `serverName`). There is no switch
 * that turns any of that off.
 */

/** The system CA bundle: present on Debian/Ubuntu hosts and in the envoyproxy/envoy image alike. */
export const SYSTEM_CA_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';

const HOST_NAME = /^(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/i;
const path = z.string().min(1);

export const OutboundTlsSchema = z
  .object({
    /** PEM bundle of the CAs trusted for public endpoints. */
    caBundleFile: path.default(SYSTEM_CA_BUNDLE),
    /** A private CA (PEM) trusted instead of the bundle (private endpoints); null: the bundle. */
    customCaFile: path.nullable().default(null),
    /** Client certificate chain (PEM) for endpoints that require mutual TLS; with clientKeyFile. */
    clientCertFile: path.nullable().default(null),
    /** Private key (PEM) of clientCertFile. */
    clientKeyFile: path.nullable().default(null),
    /** Name sent as SNI and required in the certificate; null: the host of the URL. */
    serverName: z
      .string()
      .regex(HOST_NAME, 'a DNS host name')
      .nullable()
      .default(null),
    /** Oldest TLS version accepted. */
    minVersion: z.enum(['1.2', '1.3']).default('1.2'),
  })
  .strict()
  .refine((t) => (t.clientCertFile === null) === (t.clientKeyFile === null), {
    message: 'clientCertFile and clientKeyFile go together (both or neither)',
    path: ['clientKeyFile'],
  });

export type OutboundTls = z.infer<typeof OutboundTlsSchema>;

/** Every field at its default: the system bundle, no client certificate, the URL's host, TLS 1.2 or later. */
export const DEFAULT_OUTBOUND_TLS: OutboundTls = Object.freeze({
  caBundleFile: SYSTEM_CA_BUNDLE,
  customCaFile: null,
  clientCertFile: null,
  clientKeyFile: null,
  serverName: null,
  minVersion: '1.2',
});

/** The file whose CAs are trusted: the custom CA if set, else the bundle. */
export const trustedCaFile = (tls: OutboundTls): string => tls.customCaFile ?? tls.caBundleFile;

/** Every file these settings make the client read, with the key that names it (for error messages). */
export function tlsFiles(tls: OutboundTls): Array<{ key: keyof OutboundTls; file: string }> {
  const out: Array<{ key: keyof OutboundTls; file: string }> = [{ key: tls.customCaFile ? 'customCaFile' : 'caBundleFile', file: trustedCaFile(tls) }];
  if (tls.clientCertFile && tls.clientKeyFile) {
    out.push({ key: 'clientCertFile', file: tls.clientCertFile }, { key: 'clientKeyFile', file: tls.clientKeyFile });
  }
  return out;
}

/**
 * The name the peer's certificate must carry (and the SNI when it is a host
 * name): `serverName`, else the host connected to.
 */
export function expectedPeerName(tls: OutboundTls, host: string): { name: string; isIp: boolean } {
  const name = tls.serverName ?? host.replace(/^\[|\]$/g, '');
  return { name, isIp: isIP(name) !== 0 };
}
