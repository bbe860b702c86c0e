// The ext_proc adapter over real gRPC: a step that throws fails only its own
// exchange, with a gRPC status Envoy acts on at once (fail closed), never a
// stream left open or an exception that takes the process down; a streamed
// response gets an answer only for provider reads that complete an event.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { credentials, makeGenericClientConstructor, type ClientDuplexStream, type ServiceError } from '@grpc/grpc-js';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createExternalProcessorService } from '../../sidecar/src/adapters/envoy/ext-proc-service.js';
import { startGrpcServer } from '../../sidecar/src/adapters/grpc-server.js';
import type { BidiReceiver } from '../../sidecar/src/adapters/grpc-direct.js';
import { defaultConfig } from '../../sidecar/src/config/defaults.js';
import { parseConfig } from '../../sidecar/src/config/load.js';
import { Catalog } from '../../sidecar/src/domain/catalog.js';
import { AdmissionCache } from '../../sidecar/src/domain/admission-cache.js';
import { admitBody } from '../../sidecar/src/domain/admission.js';
import { Errors, gatewayError, type GatewayError } from '../../sidecar/src/domain/errors.js';
import type { ExchangeSummary } from '../../sidecar/src/domain/exchange.js';
import { ExternalProcessorService, ProcessingRequest, type ProcessingResponse } from '../../sidecar/src/generated/envoy/service/ext_proc/v3/external_processor.js';
import { until } from '../harness/until.js';

const cfg = parseConfig(defaultConfig('svc'));
const catalog = new Catalog(cfg.models, 'svc');
const summaries: ExchangeSummary[] = [];
const claims: Array<{ requestId: string; leased: boolean }> = [];
/** How the test answers the confirmation of a hold moved out of a credit lease, by request id. */
const confirmations = new Map<string, (refusal: GatewayError | null) => void>();
/** ext_authz's admissions in this process (the test puts what a gate would have). */
const admissions = new AdmissionCache();
const policy = { catalog, defaultTemperature: 0.7, maxEmbeddingInputs: 256, maxRequestBytes: 1 << 20 };
let server: { close: () => Promise<void> };
let address: string;
let dir: string | undefined;

/** The adapter's dependencies: a gateway with no store behind it (claims and summaries recorded here). */
const deps = (): Parameters<typeof createExternalProcessorService>[0] => ({
    exchange: {
      brand: 'svc',
      apiPrefix: '/v1',
      catalog,
      admission: policy,
      admissions,
      maxResponseBytes: 1 << 20,
      identityProvider: () => ({}),
      usage: async () => ({ ok: true, body: '{}' }),
    },
    log: pino({ level: 'silent' }),
    claim: ({ requestId, leased }) => {
      if (requestId === 'req-boom') throw new Error('claim exploded');
      claims.push({ requestId, leased });
      return leased ? new Promise<GatewayError | null>((resolve) => confirmations.set(requestId, resolve)) : null;
    },
    streamStallMs: 60_000,
    onSummary: (s) => summaries.push(s),
});

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'extproc-'));
  address = `unix:${join(dir, 'sock')}`;
  server = await startGrpcServer(address, { authz: { check: () => {} } as never, extProc: createExternalProcessorService(deps()) });
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

/** The first message of a chat exchange the gate admitted (principal and hold in ext_authz's metadata). */
function chatRequestBody(requestId: string, request: Record<string, unknown>, leased = false): ProcessingRequest {
  const authz = { tenant_id: 'ten_1', subject_id: 'key_1', auth_method: 'api_key', scopes: 'ai', key_id: 'key_1', role: '', held: '100', ...(leased ? { leased: '1' } : {}) };
  return {
    requestBody: { body: Buffer.from(JSON.stringify(request)), endOfStream: true, endOfStreamWithoutMessage: false, grpcMessageCompressed: false },
    metadataContext: {
      filterMetadata: { 'envoy.filters.http.ext_authz': authz },
      typedFilterMetadata: {},
    },
    attributes: { 'envoy.filters.http.ext_proc': { 'request.id': requestId, 'request.path': '/v1/chat/completions', 'request.method': 'POST' } },
    observabilityMode: false,
  } as ProcessingRequest;
}

describe('ext_proc adapter failures', () => {
  it('a step that throws ends the call with INTERNAL at once and closes the exchange', async () => {
    const call = open();
    const ended = new Promise<ServiceError>((resolve) => call.on('error', resolve));
    call.write(chatRequestBody('req-boom', { model: 'svc-core', messages: [{ role: 'user', content: 'hi' }] }));
    // Without a status the call would stay open until Envoy's own timeout; 3 s is far beyond a status sent at once.
    const err = await Promise.race([ended, new Promise<null>((r) => setTimeout(() => r(null), 3000))]);
    expect(err?.code).toBe(13);
    expect(summaries.find((s) => s.requestId === 'req-boom')).toBeDefined();
  });
});

describe('ext_proc adapter, the gate’s decision', () => {
  it('when ext_authz ran in this process, the exchange starts from its decision and the body it admitted, without the metadata Envoy forwards', async () => {
    const request = { model: 'svc-core', messages: [{ role: 'user', content: 'hi' }] };
    const message = chatRequestBody('req-here', request);
    const admitted = admitBody('chat', 'POST', message.requestBody!.body, policy);
    if (!admitted.ok) throw new Error('refused');
    const principal = { tenantId: 'ten_here', subjectId: 'key_here', method: 'api_key' as const, scopes: ['ai'], keyId: 'key_here', role: null };
    admissions.put('req-here', message.requestBody!.body, admitted, { principal, held: 777, leased: false, lease: null });
    const call = open();
    const answer = new Promise<ProcessingResponse>((resolve) => call.once('data', resolve));
    call.write({ ...message, metadataContext: undefined }); // nothing forwarded: only the cache can say who asked
    const r = await answer;
    expect(r.requestBody?.response?.bodyMutation?.body).toEqual(admitted.upstreamBody);
    expect(claims).toContainEqual({ requestId: 'req-here', leased: false });
    expect(admissions.size).toBe(0); // taken
    call.end();
    await new Promise((r2) => call.on('end', r2).on('error', r2).resume());
    const s = summaries.find((x) => x.requestId === 'req-here');
    expect(s?.principal).toEqual(principal);
    expect(s?.held).toBe(777);
  });

  it('without it, the metadata Envoy forwards is read; with none, nothing is served', async () => {
    const call = open();
    const answer = new Promise<ProcessingResponse>((resolve) => call.once('data', resolve));
    call.write({ ...chatRequestBody('req-none', { model: 'svc-core', messages: [{ role: 'user', content: 'hi' }] }), metadataContext: undefined });
    expect((await answer).immediateResponse?.status?.code).toBe(404);
    call.end();
  });
});

describe('ext_proc adapter, a hold moved out of a credit lease', () => {
  const firstAnswer = (call: ClientDuplexStream<ProcessingRequest, ProcessingResponse>) =>
    new Promise<ProcessingResponse>((resolve) => call.once('data', resolve));

  it('the body goes on only once the store has confirmed the hold; none is answered before', async () => {
    const call = open();
    const answer = firstAnswer(call);
    call.write(chatRequestBody('req-leased-ok', { model: 'svc-core', messages: [{ role: 'user', content: 'hi' }] }, true));
    await until('the claim', () => confirmations.has('req-leased-ok')); // a new connection, then the first message
    expect(claims).toContainEqual({ requestId: 'req-leased-ok', leased: true });
    const early = await Promise.race([answer, new Promise<null>((r) => setTimeout(() => r(null), 100))]);
    expect(early).toBeNull();
    confirmations.get('req-leased-ok')!(null);
    const r = await answer;
    expect(r.immediateResponse).toBeUndefined();
    expect(r.requestBody?.response?.bodyMutation?.body?.toString()).toContain('"messages"');
    call.end();
  });

  it.each([
    ['req-leased-lost', Errors.creditsUnavailable, 503, 'credits_unavailable'],
    ['req-leased-poor', Errors.insufficientCredit, 402, 'insufficient_credit'],
  ] as const)('%s: a hold the store does not confirm is refused with the error the confirmation names, with the request id', async (id, entry, status, code) => {
    const call = open();
    const answer = firstAnswer(call);
    call.write(chatRequestBody(id, { model: 'svc-core', messages: [{ role: 'user', content: 'hi' }] }, true));
    await until('the claim', () => confirmations.has(id));
    confirmations.get(id)!(gatewayError(entry));
    const r = await answer;
    expect(r.immediateResponse?.status?.code).toBe(status);
    const body = JSON.parse(r.immediateResponse!.body.toString()) as { error: { code: string; request_id: string } };
    expect(body.error).toMatchObject({ code, request_id: id });
    await new Promise((r2) => call.on('end', r2).on('error', r2));
    const s = summaries.find((x) => x.requestId === id);
    expect(s?.status).toBe(status);
    expect(s?.held).toBe(100); // still released at the end, in case the hold was written after all
  });

  it('a hold placed directly (not leased) is not waited for', async () => {
    const call = open();
    const answer = firstAnswer(call);
    call.write(chatRequestBody('req-direct', { model: 'svc-core', messages: [{ role: 'user', content: 'hi' }] }));
    const r = await answer;
    expect(r.requestBody?.response?.bodyMutation?.body).toBeDefined();
    expect(claims).toContainEqual({ requestId: 'req-direct', leased: false });
    call.end();
  });
});

const header = (key: string, value: string) => ({ key, value: '', rawValue: Buffer.from(value) });
const bodyMessage = (text: string, endOfStream = false) => ProcessingRequest.fromPartial({ responseBody: { body: Buffer.from(text), endOfStream } });
const event = (content: string) =>
  `data: {"id":"p","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}},"finish_reason":null}]}\n\n`;
const FINISH = 'data: {"id":"p","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n';
const streamHeaders = () => ProcessingRequest.fromPartial({ responseHeaders: { headers: { headers: [header(':status', '200'), header('content-type', 'text/event-stream')] } } });

describe('ext_proc adapter, a streamed response', () => {

  it('answers a provider read only when it completes an event, before the first event and after it; one summary when it ends', async () => {
    const call = open();
    const answers: ProcessingResponse[] = [];
    const waiting: Array<{ n: number; resolve: () => void }> = [];
    call.on('data', (r: ProcessingResponse) => {
      answers.push(r);
      for (const w of waiting) if (answers.length >= w.n) w.resolve();
    });
    /** Resolves once n answers have arrived (answers come in order, so the nth is the one to check). */
    const answered = (n: number) => new Promise<void>((resolve) => (answers.length >= n ? resolve() : waiting.push({ n, resolve })));
    call.write(chatRequestBody('req-slices', { model: 'svc-core', stream: true, messages: [{ role: 'user', content: 'hi' }] }));
    await answered(1);
    call.write(streamHeaders());
    const first = event('one');
    call.write(bodyMessage(first.slice(0, 20))); // no event yet: no answer, and the headers stay held
    call.write(bodyMessage(first.slice(20)));
    await answered(3);
    expect(answers[1]?.responseHeaders).toBeDefined();
    expect(answers[2]?.responseBody?.response?.bodyMutation?.streamedResponse?.body.toString()).toContain('"content":"one"');
    const second = event('two');
    call.write(bodyMessage(second.slice(0, 30))); // a slice of an event after the first one: no answer either
    call.write(bodyMessage(second.slice(30)));
    await answered(4);
    expect(answers[3]?.responseBody?.response?.bodyMutation?.streamedResponse?.body.toString()).toContain('"content":"two"');
    call.write(bodyMessage(`${FINISH}data: [DONE]\n\n`, true));
    await answered(5);
    const last = answers[4]?.responseBody?.response?.bodyMutation?.streamedResponse;
    expect(last?.endOfStream).toBe(true);
    expect(last?.body.toString()).toContain('data: [DONE]');
    expect(answers).toHaveLength(5);
    await new Promise((r) => call.on('end', r).on('error', r));
    const summary = summaries.filter((s) => s.requestId === 'req-slices');
    expect(summary).toHaveLength(1);
    expect(summary[0]?.outcome).toBe('ok');
  });
});

/**
 * Envoy's messages of one stream often arrive several in one turn of the event
 * loop: their answers go out as one message at the end of that turn (fewer
 * messages for both sides), except the first event and the caller's last,
 * which are never kept back. Driven on a stand-in call, so "one turn" is exact.
 */
describe('ext_proc adapter, pieces that arrive together', () => {
  /** A call the adapter can serve: what it writes is kept in order; emit() delivers what grpc-js's listener would. */
  function standInCall() {
    let receiver: BidiReceiver<ProcessingRequest> | null = null;
    const call = {
      written: [] as ProcessingResponse[],
      ended: false,
      ends: 0,
      write: (r: ProcessingResponse) => void call.written.push(r),
      end: () => {
        call.ended = true;
        call.ends++;
      },
      fail: () => {
        call.ended = true;
      },
      serve(r: BidiReceiver<ProcessingRequest>) {
        receiver = r;
      },
      emit(event: 'data' | 'end', req?: ProcessingRequest) {
        if (event === 'data') receiver?.message(req!);
        else receiver?.halfClosed();
      },
    };
    return call;
  }
  const piece = (r: ProcessingResponse | undefined) => r?.responseBody?.response?.bodyMutation?.streamedResponse;
  const turn = () => new Promise((r) => setImmediate(r));

  function started(requestId: string) {
    const call = standInCall();
    call.serve(createExternalProcessorService(deps()).process(call));
    call.emit('data', chatRequestBody(requestId, { model: 'svc-core', stream: true, messages: [{ role: 'user', content: 'hi' }] }));
    call.emit('data', streamHeaders());
    call.emit('data', bodyMessage(event('one')));
    // The request body's answer, then the headers and the first event, at once.
    expect(call.written).toHaveLength(3);
    expect(piece(call.written[2])?.body.toString()).toContain('"content":"one"');
    return call;
  }

  it('answers the pieces of one turn with one message, in order, at the end of the turn; the caller\'s [DONE] at once', async () => {
    const call = started('req-together');
    for (const word of ['two', 'three', 'four']) call.emit('data', bodyMessage(event(word)));
    expect(call.written).toHaveLength(3);
    await turn();
    expect(call.written).toHaveLength(4);
    const joined = piece(call.written[3])!;
    expect(joined.endOfStream).toBe(false);
    expect(joined.body.toString().match(/"content":"\w+"/g)).toEqual(['"content":"two"', '"content":"three"', '"content":"four"']);
    call.emit('data', bodyMessage(event('five')));
    call.emit('data', bodyMessage(`${FINISH}data: [DONE]\n\n`));
    // The piece that ends what the caller reads is not kept back, and takes the one before with it.
    expect(call.written).toHaveLength(5);
    expect(piece(call.written[4])?.body.toString()).toMatch(/"content":"five"[\s\S]*data: \[DONE\]\n\n$/);
    call.emit('data', bodyMessage('', true));
    expect(call.written).toHaveLength(6);
    expect(piece(call.written[5])).toMatchObject({ endOfStream: true });
    expect(piece(call.written[5])?.body.length).toBe(0);
    expect(call.ended).toBe(true);
  });

  it("Envoy's half-close ends our side only if the exchange's last answer has not (a second end() builds an error to drop)", () => {
    const done = started('req-half-close');
    done.emit('data', bodyMessage(`${FINISH}data: [DONE]\n\n`, true));
    expect(done.ends).toBe(1);
    done.emit('end');
    expect(done.ends).toBe(1);
    // A caller gone mid-stream: Envoy closes first, and our side is ended then.
    const left = started('req-half-close-early');
    left.emit('end');
    expect(left.ends).toBe(1);
    expect(summaries.filter((s) => s.requestId === 'req-half-close-early').map((s) => s.outcome)).toEqual(['interrupted']);
  });

  it('a piece kept back goes out with the answer that ends the body, never after it', async () => {
    const call = started('req-together-end');
    call.emit('data', bodyMessage(event('two')));
    call.emit('data', bodyMessage(`${FINISH}data: [DONE]\n\n`, true));
    expect(call.written).toHaveLength(4);
    const last = piece(call.written[3])!;
    expect(last.endOfStream).toBe(true);
    expect(last.body.toString()).toMatch(/"content":"two"[\s\S]*data: \[DONE\]\n\n$/);
    await turn();
    expect(call.written).toHaveLength(4);
    expect(summaries.filter((s) => s.requestId === 'req-together-end').map((s) => s.outcome)).toEqual(['ok']);
  });
});
