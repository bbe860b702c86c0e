// The ext_proc adapter over real gRPC: a step that throws fails only its own
// exchange, with a gRPC status Envoy acts on at once (fail closed), never a
// stream left open or an exception that takes the process down.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { credentials, makeGenericClientConstructor, type ClientDuplexStream, type ServiceError } from '@grpc/grpc-js';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createExternalProcessorService } from '../../sidecar/src/adapters/envoy/ext-proc-service.js';
import { startGrpcServer } from '../../sidecar/src/adapters/grpc-server.js';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import type { ExchangeSummary } from '../../sidecar/src/domain/exchange.js';
import { ExternalProcessorService, type ProcessingRequest, type ProcessingResponse } from '../../sidecar/src/generated/envoy/service/ext_proc/v3/external_processor.js';

const cfg = parseConfig(defaultConfig('svc'));
const catalog = new Catalog(cfg.models, 'svc');
const summaries: ExchangeSummary[] = [];
let server: { close: () => Promise<void> };
let address: string;
let dir: string | undefined;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'extproc-'));
  address = `unix:${join(dir, 'sock')}`;
  const extProc = createExternalProcessorService({
    exchange: {
      brand: 'svc',
      apiPrefix: '/v1',
      catalog,
      admission: { catalog, defaultTemperature: 0.7, maxEmbeddingInputs: 256, maxRequestBytes: 1 << 20 },
      identityProvider: () => ({}),
      usage: async () => ({ ok: true, body: '{}' }),
    },
    log: pino({ level: 'silent' }),
    claim: () => {
      throw new Error('claim exploded');
    },
    streamStallMs: 60_000,
    onSummary: (s) => summaries.push(s),
  });
  server = await startGrpcServer(address, { authz: { check: () => {} } as never, extProc });
});
afterAll(async () => {
  await server?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function open(): ClientDuplexStream<ProcessingRequest, ProcessingResponse> {
  const Client = makeGenericClientConstructor(ExternalProcessorService as never, 'ExternalProcessor');
  const client = new Client(address, credentials.createInsecure()) as unknown as {
    process(): ClientDuplexStream<ProcessingRequest, ProcessingResponse>;
  };
  return client.process();
}

describe('ext_proc adapter failures', () => {
  it('a step that throws ends the call with INTERNAL at once and closes the exchange', async () => {
    const call = open();
    const ended = new Promise<ServiceError>((resolve) => call.on('error', resolve));
    const body = Buffer.from(JSON.stringify({ model: 'svc-core', messages: [{ role: 'user', content: 'hi' }] }));
    call.write({
      requestBody: { body, endOfStream: true, endOfStreamWithoutMessage: false, grpcMessageCompressed: false },
      metadataContext: {
        filterMetadata: { 'envoy.filters.http.ext_authz': { tenant_id: 'ten_1', subject_id: 'key_1', auth_method: 'api_key', scopes: 'ai', key_id: 'key_1', role: '', held: '100' } },
        typedFilterMetadata: {},
      },
      attributes: { 'envoy.filters.http.ext_proc': { 'request.id': 'req-boom', 'request.path': '/v1/chat/completions', 'request.method': 'POST' } },
      observabilityMode: false,
    } as ProcessingRequest);
    // Without a status the call would stay open until Envoy's own timeout; 3 s is far beyond a status sent at once.
    const err = await Promise.race([ended, new Promise<null>((r) => setTimeout(() => r(null), 3000))]);
    expect(err?.code).toBe(13);
    expect(summaries.find((s) => s.requestId === 'req-boom')).toBeDefined();
  });
});
