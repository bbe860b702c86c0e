// Wire compatibility: a grpc-js server built from the ts-proto service
// definitions talks to a client built by @grpc/proto-loader (protobufjs) from
// the same .proto files. Two independent codecs must agree on every field.
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PROTO_DIR, WELL_KNOWN_PROTO_DIR } from '../../sidecar/stack/proto-gen-lib.js';
import { HeaderValueOption_HeaderAppendAction } from '../../sidecar/src/generated/envoy/config/core/v3/base.js';
import {
  AuthorizationService,
  type AuthorizationServer,
  type CheckRequest,
} from '../../sidecar/src/generated/envoy/service/auth/v3/external_auth.js';
import {
  CommonResponse_ResponseStatus,
  ExternalProcessorService,
  type ExternalProcessorServer,
  type ProcessingRequest,
} from '../../sidecar/src/generated/envoy/service/ext_proc/v3/external_processor.js';
import { StatusCode } from '../../sidecar/src/generated/envoy/type/v3/http_status.js';

// Loosely typed view of proto-loader's dynamic client objects.
type Dyn = Record<string, any>;
type ClientCtor = new (address: string, creds: grpc.ChannelCredentials) => grpc.Client & Dyn;

const NON_UTF8 = Buffer.from([0xff, 0x00, 0xc3, 0x28, 0x7f]);

let server: grpc.Server;
let address: string;
let authClient: grpc.Client & Dyn;
let procClient: grpc.Client & Dyn;
const seenChecks: CheckRequest[] = [];
const seenProcess: ProcessingRequest[] = [];

const authImpl: AuthorizationServer = {
  check(call, callback) {
    seenChecks.push(call.request);
    callback(null, {
      status: { code: 0, message: 'ok', details: [] },
      okResponse: {
        headers: [
          {
            header: { key: 'x-tenant', value: 'acme', rawValue: Buffer.alloc(0) },
            appendAction: HeaderValueOption_HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD,
            keepEmptyValue: false,
          },
        ],
        headersToRemove: ['authorization'],
        responseHeadersToAdd: [],
        queryParametersToSet: [],
        queryParametersToRemove: [],
      },
      // ts-proto maps google.protobuf.Struct to a plain JSON object.
      dynamicMetadata: { tenant: 'acme', limits: { rpm: 60 } },
    });
  },
};

const procImpl: ExternalProcessorServer = {
  process(call) {
    call.on('data', (req: ProcessingRequest) => {
      seenProcess.push(req);
      if (req.requestHeaders) {
        call.write({
          requestHeaders: {
            response: {
              status: CommonResponse_ResponseStatus.CONTINUE_AND_REPLACE,
              headerMutation: {
                setHeaders: [
                  {
                    header: { key: 'x-upstream-key', value: '', rawValue: NON_UTF8 },
                    appendAction: HeaderValueOption_HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD,
                    keepEmptyValue: false,
                  },
                ],
                removeHeaders: ['x-api-key'],
              },
              clearRouteCache: true,
            },
          },
          requestDrain: false,
        });
      } else if (req.requestBody) {
        call.write({
          immediateResponse: {
            status: { code: StatusCode.TooManyRequests },
            body: Buffer.concat([Buffer.from('{"error":"slow down"}'), NON_UTF8]),
            grpcStatus: { status: 8 },
            details: 'rate_limited',
          },
          requestDrain: false,
        });
        call.end();
      }
    });
    call.on('end', () => call.end());
  },
};

beforeAll(async () => {
  server = new grpc.Server();
  server.addService(AuthorizationService, authImpl);
  server.addService(ExternalProcessorService, procImpl);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  address = `127.0.0.1:${port}`;

  const def = protoLoader.loadSync(
    ['envoy/service/auth/v3/external_auth.proto', 'envoy/service/ext_proc/v3/external_processor.proto'],
    {
      includeDirs: [PROTO_DIR, WELL_KNOWN_PROTO_DIR],
      keepCase: true,
      longs: Number,
      enums: String,
      bytes: Buffer,
      defaults: false,
      oneofs: true,
    },
  );
  const pkg = grpc.loadPackageDefinition(def) as Dyn;
  const Authorization = pkg['envoy']['service']['auth']['v3']['Authorization'] as ClientCtor;
  const ExternalProcessor = pkg['envoy']['service']['ext_proc']['v3']['ExternalProcessor'] as ClientCtor;
  authClient = new Authorization(address, grpc.credentials.createInsecure());
  procClient = new ExternalProcessor(address, grpc.credentials.createInsecure());
});

afterAll(() => {
  authClient?.close();
  procClient?.close();
  server?.forceShutdown();
});

describe('ext_authz Authorization/Check wire format', () => {
  it('round-trips a CheckRequest and CheckResponse between ts-proto and proto-loader', async () => {
    const request = {
      attributes: {
        source: {
          address: { socket_address: { protocol: 'TCP', address: '203.0.113.7', port_value: 54321 } },
          principal: 'spiffe://client',
        },
        destination: { address: { pipe: { path: '/run/envoy.sock', mode: 0o600 } } },
        request: {
          time: { seconds: 1_700_000_000, nanos: 5 },
          http: {
            id: 'req-1',
            method: 'POST',
            path: '/v1/chat/completions',
            host: 'gw.local',
            headers: { authorization: 'Bearer abc', 'content-type': 'application/json' },
            header_map: { headers: [{ key: 'x-bin', raw_value: NON_UTF8 }] },
            size: 1234,
            raw_body: Buffer.from('{"model":"m"}'),
          },
        },
        context_extensions: { route: 'chat' },
        // protobufjs' bundled well-known types use camelCase field names even with keepCase.
        metadata_context: { filter_metadata: { 'envoy.lb': { fields: { canary: { boolValue: true } } } } },
        tls_session: { sni: 'gw.local' },
      },
    };
    const response = await new Promise<Dyn>((resolve, reject) =>
      authClient['Check'](request, (err: grpc.ServiceError | null, res: Dyn) => (err ? reject(err) : resolve(res))),
    );

    const got = seenChecks.at(-1);
    const attrs = got?.attributes;
    expect(attrs?.source?.address?.socketAddress).toMatchObject({ address: '203.0.113.7', portValue: 54321 });
    expect(attrs?.source?.principal).toBe('spiffe://client');
    expect(attrs?.destination?.address?.pipe).toEqual({ path: '/run/envoy.sock', mode: 0o600 });
    expect(attrs?.request?.time).toEqual({ seconds: 1_700_000_000, nanos: 5 });
    const http = attrs?.request?.http;
    expect(http?.headers).toEqual({ authorization: 'Bearer abc', 'content-type': 'application/json' });
    expect(http?.headerMap?.headers).toHaveLength(1);
    expect(http?.headerMap?.headers[0]?.key).toBe('x-bin');
    expect(Buffer.compare(http?.headerMap?.headers[0]?.rawValue ?? Buffer.alloc(0), NON_UTF8)).toBe(0);
    expect(http).toMatchObject({ id: 'req-1', method: 'POST', path: '/v1/chat/completions', size: 1234 });
    expect(http?.rawBody.toString()).toBe('{"model":"m"}');
    expect(attrs?.contextExtensions).toEqual({ route: 'chat' });
    expect(attrs?.metadataContext?.filterMetadata['envoy.lb']).toEqual({ canary: true });
    expect(attrs?.tlsSession?.sni).toBe('gw.local');

    // proto3 omits zero values on the wire; with defaults:false proto-loader leaves them unset.
    expect(response['status']['code'] ?? 0).toBe(0);
    expect(response['status']['message']).toBe('ok');
    expect(response['http_response']).toBe('ok_response');
    expect(response['ok_response']['headers'][0]).toMatchObject({
      header: { key: 'x-tenant', value: 'acme' },
      append_action: 'OVERWRITE_IF_EXISTS_OR_ADD',
    });
    expect(response['ok_response']['headers_to_remove']).toEqual(['authorization']);
    expect(response['dynamic_metadata']['fields']['tenant']).toMatchObject({ stringValue: 'acme' });
    expect(response['dynamic_metadata']['fields']['limits']['structValue']['fields']['rpm']).toMatchObject({
      numberValue: 60,
    });
  });
});

describe('ext_proc ExternalProcessor/Process wire format', () => {
  it('exchanges headers, header mutations and an immediate response over a bidi stream', async () => {
    const call = procClient['Process']() as grpc.ClientDuplexStream<Dyn, Dyn>;
    const responses: Dyn[] = [];
    const done = new Promise<void>((resolve, reject) => {
      call.on('data', (msg: Dyn) => {
        responses.push(msg);
        if (msg['request_headers']) {
          call.write({ request_body: { body: Buffer.from('hello'), end_of_stream: true } });
        }
      });
      call.on('error', reject);
      call.on('end', resolve);
    });
    call.write({
      request_headers: {
        headers: {
          headers: [
            { key: ':path', raw_value: Buffer.from('/v1/models') },
            { key: 'x-api-key', raw_value: NON_UTF8 },
          ],
        },
        end_of_stream: false,
      },
      attributes: { 'envoy.filters.http.ext_proc': { fields: { 'request.id': { stringValue: 'r1' } } } },
      protocol_config: { request_body_mode: 'FULL_DUPLEX_STREAMED', send_body_without_waiting_for_header_response: true },
    });
    await done;
    call.end();

    // What the ts-proto server decoded.
    expect(seenProcess).toHaveLength(2);
    const first = seenProcess[0];
    const hdrs = first?.requestHeaders?.headers?.headers ?? [];
    expect(hdrs.map((h) => h.key)).toEqual([':path', 'x-api-key']);
    expect(hdrs[0]?.rawValue.toString()).toBe('/v1/models');
    expect(Buffer.compare(hdrs[1]?.rawValue ?? Buffer.alloc(0), NON_UTF8)).toBe(0);
    expect(first?.requestHeaders?.endOfStream).toBe(false);
    expect(first?.attributes['envoy.filters.http.ext_proc']).toEqual({ 'request.id': 'r1' });
    expect(first?.protocolConfig).toEqual({
      requestBodyMode: 4, // FULL_DUPLEX_STREAMED
      responseBodyMode: 0,
      sendBodyWithoutWaitingForHeaderResponse: true,
    });
    expect(seenProcess[1]?.requestBody?.body.toString()).toBe('hello');
    expect(seenProcess[1]?.requestBody?.endOfStream).toBe(true);

    // What the proto-loader client decoded.
    expect(responses).toHaveLength(2);
    const [headersResp, immediate] = responses as [Dyn, Dyn];
    expect(headersResp['response']).toBe('request_headers');
    const common = headersResp['request_headers']['response'];
    expect(common['status']).toBe('CONTINUE_AND_REPLACE');
    expect(common['clear_route_cache']).toBe(true);
    const set = common['header_mutation']['set_headers'][0];
    expect(set['header']['key']).toBe('x-upstream-key');
    expect(Buffer.compare(set['header']['raw_value'], NON_UTF8)).toBe(0);
    expect(set['append_action']).toBe('OVERWRITE_IF_EXISTS_OR_ADD');
    expect(common['header_mutation']['remove_headers']).toEqual(['x-api-key']);

    expect(immediate['response']).toBe('immediate_response');
    const ir = immediate['immediate_response'];
    expect(ir['status']).toEqual({ code: 'TooManyRequests' });
    expect(Buffer.isBuffer(ir['body'])).toBe(true);
    expect(Buffer.compare(ir['body'], Buffer.concat([Buffer.from('{"error":"slow down"}'), NON_UTF8]))).toBe(0);
    expect(ir['grpc_status']).toEqual({ status: 8 });
    expect(ir['details']).toBe('rate_limited');
  });
});
