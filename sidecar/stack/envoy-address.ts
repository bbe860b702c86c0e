import { isIP } from 'node:net';

/** An Envoy `Address` for "unix:/path" or "host:port". */
export function envoyAddress(target: string): Record<string, unknown> {
  if (target.startsWith('unix:')) return { pipe: { path: target.slice('unix:'.length) } };
  const i = target.lastIndexOf(':');
  const host = target.slice(0, i).replace(/^\[|\]$/g, '');
  const port = Number(target.slice(i + 1));
  if (i <= 0 || !Number.isInteger(port)) throw new Error(`not host:port or unix:path: ${target}`);
  return { socket_address: { address: host, port_value: port } };
}

export interface ParsedUpstream {
  readonly host: string;
  readonly port: number;
  /** Host header for the provider: host, plus the port when it is not the scheme's default. */
  readonly hostHeader: string;
  readonly tls: boolean;
  /** Path prefix without trailing slash, e.g. "/v1" or "". */
  readonly basePath: string;
  readonly isIpLiteral: boolean;
}

export function parseUpstreamUrl(url: string): ParsedUpstream {
  const u = new URL(url);
  const tls = u.protocol === 'https:';
  const host = u.hostname.replace(/^\[|\]$/g, '');
  return {
    host,
    hostHeader: u.host,
    port: u.port ? Number(u.port) : tls ? 443 : 80,
    tls,
    basePath: u.pathname.replace(/\/+$/, ''),
    isIpLiteral: isIP(host) !== 0,
  };
}
