import { readFileSync } from 'node:fs';
import { Agent as HttpAgent, request as httpRequest, type Agent, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { checkServerIdentity, type ConnectionOptions, type PeerCertificate } from 'node:tls';
import { expectedPeerName, tlsFiles, type OutboundTls } from '../config/outbound-tls.js';

/**
 * Node's side of the outbound TLS settings (sidecar/src/config/outbound-tls.ts):
 * connection options for node:tls / node:https / ioredis, with the files read
 * once, when the connection is set up at start. Envoy's side of the same
 * settings is rendered in sidecar/stack/envoy-config.ts.
 *
 * Usage, for any client that takes Node TLS options:
 *
 *   const tlsOptions = nodeTlsOptions(cfg.x.tls, new URL(cfg.x.url).hostname, 'x.tls');
 *   https.request(url, { ...tlsOptions }) / new https.Agent(tlsOptions) / new Redis(url, { tls: tlsOptions })
 */

function readPem(file: string, what: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new Error(`${what}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
}

/**
 * Connection options that verify the peer: its chain against the trusted CA
 * file, its validity period, and its name (serverName, else `host`, as a DNS
 * name or an IP address); a client certificate when configured. `where`
 * names the setting in error messages (e.g. "identity.tls").
 */
export function nodeTlsOptions(tls: OutboundTls, host: string, where: string): ConnectionOptions {
  const peer = expectedPeerName(tls, host);
  const pem = Object.fromEntries(tlsFiles(tls).map(({ key, file }) => [key, readPem(file, `${where}.${key}`)]));
  return {
    ca: pem.customCaFile ?? pem.caBundleFile,
    ...(pem.clientCertFile && pem.clientKeyFile ? { cert: pem.clientCertFile, key: pem.clientKeyFile } : {}),
    minVersion: tls.minVersion === '1.3' ? 'TLSv1.3' : 'TLSv1.2',
    rejectUnauthorized: true,
    // SNI is a host name only (RFC 6066); an IP is still checked against the certificate's IP SANs.
    ...(peer.isIp ? {} : { servername: peer.name }),
    checkServerIdentity: (_host: string, cert: PeerCertificate) => checkServerIdentity(peer.name, cert),
  };
}

export class FetchError extends Error {
  override name = 'FetchError';
  /** The HTTP status when the server answered with something other than 200. */
  constructor(message: string, readonly status: number | null = null) {
    super(message);
  }
}

export interface HttpReply {
  readonly status: number;
  readonly body: Buffer;
}

export interface HttpRequestOptions {
  readonly method?: 'GET' | 'POST';
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: string;
  /** Node TLS options (nodeTlsOptions) for an https: URL; null only for http:. */
  readonly tls: ConnectionOptions | null;
  readonly timeoutMs: number;
  /** Largest response body read; above it the request fails (default 1 MiB). */
  readonly maxBytes?: number;
  /** Connections kept open between calls (keepAliveAgent); without one, each call opens its own. */
  readonly agent?: Agent;
}

/**
 * Connections to one service kept open between calls: at most `maxSockets` at
 * once, an idle one closed after 4 s (below the 5 s a Node server keeps an idle
 * connection, so a request is not written onto one the server is closing).
 * An https one verifies every new connection with `tls` (nodeTlsOptions).
 */
export function keepAliveAgent(tls: ConnectionOptions | null, maxSockets = 32): Agent {
  const opts = { keepAlive: true, maxSockets, maxFreeSockets: 8, timeout: 4_000 };
  return tls ? new HttpsAgent({ ...opts, ...tls }) : new HttpAgent(opts);
}

/**
 * One HTTP request over http: or https: (https verified with `tls`), no
 * redirects followed (a 3xx is returned like any status), bounded in time and
 * response size; a connection is reused only through `opts.agent`. Resolves
 * with any status; rejects with FetchError when no complete answer arrives.
 */
export function httpExchange(url: string, opts: HttpRequestOptions): Promise<HttpReply> {
  const u = new URL(url);
  const maxBytes = opts.maxBytes ?? 1024 * 1024;
  return new Promise((resolve, reject) => {
    let settled = false;
    const fail = (why: string) => {
      clearTimeout(deadline);
      if (settled) return;
      settled = true;
      reject(new FetchError(why));
      req.destroy();
    };
    const onResponse = (res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size > maxBytes) fail('response too large');
        else chunks.push(c);
      });
      res.on('error', (e) => fail(e.message));
      res.on('end', () => {
        if (settled) return;
        clearTimeout(deadline);
        settled = true;
        resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) });
      });
    };
    const headers = { ...(opts.headers ?? {}), ...(opts.body === undefined ? {} : { 'content-length': String(Buffer.byteLength(opts.body)) }) };
    const common = { method: opts.method ?? 'GET', headers, agent: opts.agent ?? (false as const) };
    const req =
      u.protocol === 'https:'
        ? httpsRequest(u, { ...common, ...(opts.tls ?? {}) }, onResponse)
        : httpRequest(u, common, onResponse);
    const deadline = setTimeout(() => fail('timed out'), opts.timeoutMs);
    req.on('error', (e) => fail((e as NodeJS.ErrnoException).code ?? e.message));
    req.end(opts.body);
  });
}

/** A body as JSON, or undefined when it is not JSON. */
export function parseJsonBody(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}

/**
 * GET a JSON document over http: or https: (https verified with `tls`), no
 * redirects followed, bounded in time and size. Rejects with FetchError.
 */
export async function fetchJson(
  url: string,
  opts: { tls: ConnectionOptions | null; timeoutMs: number; maxBytes?: number; headers?: Readonly<Record<string, string>> },
): Promise<unknown> {
  const reply = await httpExchange(url, { ...opts, headers: { accept: 'application/json', ...(opts.headers ?? {}) } });
  if (reply.status !== 200) throw new FetchError(`HTTP ${reply.status}`, reply.status);
  const body = parseJsonBody(reply.body);
  if (body === undefined) throw new FetchError('not JSON');
  return body;
}

/**
 * A JSON getter for one configured URL (e.g. the JWKS URL): https is verified
 * with `tls`, whose files are read now, once. `where` names the setting.
 */
export function jsonFetcher(url: string | null, tls: OutboundTls, where: string): (target: string, timeoutMs: number) => Promise<unknown> {
  const options = url?.startsWith('https:') ? nodeTlsOptions(tls, new URL(url).hostname, where) : null;
  return (target, timeoutMs) => fetchJson(target, { tls: options, timeoutMs });
}
