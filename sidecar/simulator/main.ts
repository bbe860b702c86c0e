/**
 * CLI for the upstream simulator:
 *
 *   tsx sidecar/simulator/main.ts --port 0 --host 127.0.0.1 [--latency-ms N]
 *     [--chunk-delay-ms N] [--dims 3584] [--reasoning-models m1,m2]
 *     [--models m1,m2] [--completion-tokens 16] [--reasoning-tokens 24]
 *     [--api-key KEY] [--log] [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]
 *     [--sliced [--slice-seed N] [--slice-max BYTES] [--slice-gap-ms N]]
 *
 * --sliced writes every stream in uneven slices of 1 to --slice-max (500)
 * bytes, --slice-gap-ms (1) apart, as real providers do (`#sim:sliced` does
 * it for one request).
 *
 * With --tls-cert and --tls-key it serves HTTPS; --tls-client-ca also requires
 * a client certificate issued by that CA (mutual TLS).
 *
 * Prints one JSON line `{"event":"listening","port":N}` to stdout when ready;
 * exits cleanly on SIGINT/SIGTERM.
 */
import { parseArgs } from 'node:util';
import { readFileSync } from 'node:fs';
import { createSimulator, type SimulatorTls } from './server.js';

const USAGE =
  'usage: main.ts [--port N] [--host H] [--latency-ms N] [--chunk-delay-ms N] [--dims N] ' +
  '[--reasoning-models a,b] [--models a,b] [--completion-tokens N] [--reasoning-tokens N] [--api-key KEY] [--log] ' +
  '[--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]] [--sliced [--slice-seed N] [--slice-max BYTES] [--slice-gap-ms N]]';

function fail(message: string): never {
  process.stderr.write(`${message}\n${USAGE}\n`);
  process.exit(2);
}

function int(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value)) fail(`--${name} must be a non-negative integer, got ${JSON.stringify(value)}`);
  return Number(value);
}

function list(value: string | undefined): string[] | undefined {
  return value === undefined ? undefined : value.split(',').map((s) => s.trim()).filter(Boolean);
}

function pem(flag: string, file: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    fail(`--${flag}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
}

function tlsFiles(cert: string | undefined, key: string | undefined, clientCa: string | undefined): SimulatorTls | null {
  if (cert === undefined && key === undefined) {
    if (clientCa !== undefined) fail('--tls-client-ca needs --tls-cert and --tls-key');
    return null;
  }
  if (cert === undefined || key === undefined) fail('--tls-cert and --tls-key go together');
  return { cert: pem('tls-cert', cert), key: pem('tls-key', key), clientCa: clientCa === undefined ? null : pem('tls-client-ca', clientCa) };
}

async function main(): Promise<void> {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        port: { type: 'string', default: '0' },
        host: { type: 'string', default: '127.0.0.1' },
        'latency-ms': { type: 'string' },
        'chunk-delay-ms': { type: 'string' },
        dims: { type: 'string' },
        'reasoning-models': { type: 'string' },
        models: { type: 'string' },
        'completion-tokens': { type: 'string' },
        'reasoning-tokens': { type: 'string' },
        'api-key': { type: 'string' },
        log: { type: 'boolean', default: false },
        'tls-cert': { type: 'string' },
        'tls-key': { type: 'string' },
        'tls-client-ca': { type: 'string' },
        sliced: { type: 'boolean', default: false },
        'slice-seed': { type: 'string' },
        'slice-max': { type: 'string' },
        'slice-gap-ms': { type: 'string' },
        help: { type: 'boolean', default: false },
      },
      strict: true,
    }));
  } catch (err) {
    fail((err as Error).message);
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  let sim;
  try {
    sim = createSimulator({
      latencyMs: int('latency-ms', values['latency-ms']),
      chunkDelayMs: int('chunk-delay-ms', values['chunk-delay-ms']),
      dims: int('dims', values.dims),
      reasoningModels: list(values['reasoning-models']),
      models: list(values.models),
      completionTokens: int('completion-tokens', values['completion-tokens']),
      reasoningTokens: int('reasoning-tokens', values['reasoning-tokens']),
      apiKey: values['api-key'] ?? null,
      logger: values.log,
      tls: tlsFiles(values['tls-cert'], values['tls-key'], values['tls-client-ca']),
      slices: values.sliced
        ? {
            sliced: true,
            sliceSeed: int('slice-seed', values['slice-seed']),
            sliceMaxBytes: int('slice-max', values['slice-max']),
            sliceGapMs: int('slice-gap-ms', values['slice-gap-ms']),
          }
        : null,
    });
  } catch (err) {
    fail((err as Error).message);
  }
  const { port } = await sim.listen(int('port', values.port) ?? 0, values.host);
  process.stdout.write(`${JSON.stringify({ event: 'listening', port })}\n`);

  let stopping = false;
  const stop = (): void => {
    if (stopping) return;
    stopping = true;
    sim.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

main().catch((err: unknown) => {
  process.stderr.write(`simulator failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
  process.exit(1);
});
