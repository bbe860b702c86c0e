import { lstatSync, unlinkSync } from 'node:fs';
import { Server, ServerCredentials, status } from '@grpc/grpc-js';
import { AuthorizationService, type CheckResponse } from '../generated/envoy/service/auth/v3/external_auth.js';
import { ExternalProcessorService, type ProcessingRequest, type ProcessingResponse } from '../generated/envoy/service/ext_proc/v3/external_processor.js';
import { decodeProcessingRequest } from './envoy/processing-request-decode.js';
import { decodeCheckRequest, type CheckInput } from './envoy/check-request-decode.js';
import { encodeCheckResponse } from './envoy/check-response-encode.js';
import type { AuthorizationHandler } from './envoy/authz-service.js';
import type { ExternalProcessorHandler } from './envoy/ext-proc-service.js';
import { encodeProcessingResponse } from './envoy/processing-response-encode.js';
import { directBidi, directCalls, directUnary } from './grpc-direct.js';

/** The generated ext_proc service with the lean decoder (processing-request-decode.ts) and answer encoder (processing-response-encode.ts). */
const ExternalProcessorLean = {
  process: {
    ...ExternalProcessorService.process,
    requestDeserialize: (value: Buffer) => decodeProcessingRequest(value),
    responseSerialize: encodeProcessingResponse,
  },
} as const;

/** The generated ext_authz service with the lean request decoder (check-request-decode.ts) and answer encoder (check-response-encode.ts). */
const AuthorizationLean = {
  check: {
    ...AuthorizationService.check,
    requestDeserialize: (value: Buffer) => decodeCheckRequest(value),
    responseSerialize: encodeCheckResponse,
  },
} as const;

/**
 * What grpc-js would run for a method the direct interceptor serves: never, since the
 * interceptor starts the call with its own listener. Registered for the codecs and paths.
 */
const UNREACHED = {
  check: (_call: unknown, callback: (err: { code: number; details: string }) => void) => callback({ code: status.INTERNAL, details: 'not served' }),
  process: (call: { emit(event: 'error', err: { code: number; details: string }): void }) => call.emit('error', { code: status.INTERNAL, details: 'not served' }),
};

/** Serves ext_authz and ext_proc on one gRPC server ("unix:/path" or "host:port"). */
export async function startGrpcServer(
  address: string,
  services: { authz: AuthorizationHandler; extProc: ExternalProcessorHandler },
): Promise<{ port: number; close: () => Promise<void> }> {
  const server = new Server({
    interceptors: [
      directCalls({
        [AuthorizationService.check.path]: directUnary<CheckInput, CheckResponse>((call, respond) => services.authz.check(call, respond)),
        [ExternalProcessorService.process.path]: directBidi<ProcessingRequest, ProcessingResponse>((call) => services.extProc.process(call)),
      }),
    ],
    'grpc.max_receive_message_length': 64 * 1024 * 1024,
    'grpc.max_send_message_length': 64 * 1024 * 1024,
    'grpc.keepalive_permit_without_calls': 1,
    'grpc.http2.min_ping_interval_without_data_ms': 10_000,
    'grpc.enable_channelz': 0,
  });
  removeStaleSocket(address);
  server.addService(AuthorizationLean, { check: UNREACHED.check } as never);
  server.addService(ExternalProcessorLean, { process: UNREACHED.process } as never);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(address, ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return {
    port,
    close: () =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, 5000);
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      }),
  };
}

/** A unix socket left behind by a process that was killed would make bind fail. */
function removeStaleSocket(address: string): void {
  if (!address.startsWith('unix:')) return;
  const path = address.slice('unix:'.length);
  try {
    if (lstatSync(path).isSocket()) unlinkSync(path);
  } catch {
    // absent: nothing to remove
  }
}

