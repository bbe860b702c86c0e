// Calls served from grpc-js's call listener (grpc-direct.ts), over real gRPC on
// a unix socket: messages in order, then the half-close; answers and statuses
// as the handler gives them; a cancelled call reported and its late answer
// dropped; a handler that throws fails its own call only; other methods untouched.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  credentials,
  makeGenericClientConstructor,
  Metadata,
  Server,
  ServerCredentials,
  status,
  type ClientDuplexStream,
  type ServiceError,
} from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { directBidi, directCalls, directUnary, type BidiCall, type UnaryCall } from '../../sidecar/src/adapters/grpc-direct.js';
import { until } from '../harness/until.js';

const text = { serialize: (s: string) => Buffer.from(s), deserialize: (b: Buffer) => b.toString() };
const method = (name: string, stream: boolean) => ({
  path: `/test.Direct/${name}`,
  requestStream: stream,
  responseStream: stream,
  requestSerialize: text.serialize,
  requestDeserialize: text.deserialize,
  responseSerialize: text.serialize,
  responseDeserialize: text.deserialize,
});
const SERVICE = { chat: method('Chat', true), ask: method('Ask', false), plain: method('Plain', false) };

/** What the direct handlers saw, by the first message's (or the request's) text. */
const seen = new Map<string, string[]>();
const note = (id: string, what: string) => seen.set(id, [...(seen.get(id) ?? []), what]);
/** Unary calls held open by "wait": answered when the test says so. */
const held = new Map<string, () => void>();
/** Those calls themselves (whether they are cancelled yet). */
const waiting = new Map<string, UnaryCall<string>>();

/** The bidi handler: echoes each message upper-cased; a few messages are commands. */
function chat(call: BidiCall<string>) {
  let id = '';
  return {
    message(m: string) {
      id ||= m;
      note(id, `message ${m}`);
      if (m === 'throw') throw new Error('handler exploded');
      if (m === 'end') {
        call.end();
        call.write('after end');
        call.end();
        return;
      }
      if (m === 'fail') return call.fail({ code: status.RESOURCE_EXHAUSTED, details: 'no room' });
      call.write(m.toUpperCase());
    },
    halfClosed() {
      note(id, 'half-closed');
      if (!call.ended) call.end();
    },
    cancelled() {
      note(id, 'cancelled');
    },
  };
}

function ask(call: UnaryCall<string>, respond: (err: { code: status; details: string } | null, res: string | null) => void) {
  const m = call.request;
  note(m, `request ${m} metadata ${String(call.metadata.get('x-test')[0] ?? '')}`);
  if (m === 'throw') throw new Error('handler exploded');
  if (m === 'refuse') return respond({ code: status.PERMISSION_DENIED, details: 'no' }, null);
  if (m.startsWith('wait')) {
    waiting.set(m, call);
    held.set(m, () => {
      note(m, `cancelled ${String(call.cancelled)}`);
      respond(null, 'late');
    });
    return;
  }
  respond(null, `answer to ${m}`);
}

let server: Server;
let dir: string;
let client: {
  chat(): ClientDuplexStream<string, string>;
  ask(m: string, md: Metadata, opts: { deadline?: number }, cb: (err: ServiceError | null, res?: string) => void): void;
  plain(m: string, cb: (err: ServiceError | null, res?: string) => void): void;
};

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'direct-'));
  const address = `unix:${join(dir, 'sock')}`;
  server = new Server({
    interceptors: [directCalls({ [SERVICE.chat.path]: directBidi(chat), [SERVICE.ask.path]: directUnary(ask) })],
  });
  server.addService(SERVICE, {
    chat: () => {
      throw new Error('the registered handler of a direct method must not run');
    },
    ask: () => {
      throw new Error('the registered handler of a direct method must not run');
    },
    plain: (call: { request: string }, cb: (err: null, res: string) => void) => cb(null, `plain ${call.request}`),
  } as never);
  await new Promise<void>((resolve, reject) => server.bindAsync(address, ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())));
  const Client = makeGenericClientConstructor(SERVICE as never, 'Direct');
  client = new Client(address, credentials.createInsecure()) as never;
});
afterAll(async () => {
  server?.forceShutdown();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Writes the messages, half-closes, and collects the answers and the call's status. */
async function converse(messages: string[], halfClose = true): Promise<{ answers: string[]; code: number; details: string }> {
  const call = client.chat();
  const answers: string[] = [];
  call.on('data', (d: string) => answers.push(d));
  const done = new Promise<{ code: number; details: string }>((resolve) => {
    call.on('status', (s: { code: number; details: string }) => resolve(s));
    call.on('error', () => undefined);
  });
  for (const m of messages) call.write(m);
  if (halfClose) call.end();
  const s = await done;
  return { answers, ...s };
}

describe('a bidi call served from the call listener', () => {
  it('gets every message in order, then the half-close; its answers arrive in order with an OK status', async () => {
    const r = await converse(['one', 'two', 'three']);
    expect(r.answers).toEqual(['ONE', 'TWO', 'THREE']);
    expect(r.code).toBe(status.OK);
    // The server learns that the call is over a turn or more after the client has its status.
    await until("the server's end of the call", () => seen.get('one')?.includes('cancelled') === true);
    expect(seen.get('one')).toEqual(['message one', 'message two', 'message three', 'half-closed', 'cancelled']);
  });

  it('ended by the handler: OK at once, what it writes after the end dropped, a second end ignored', async () => {
    const r = await converse(['first', 'end'], false);
    expect(r.answers).toEqual(['FIRST']);
    expect(r.code).toBe(status.OK);
  });

  it('failed by the handler: the status it chose reaches the peer', async () => {
    const r = await converse(['x', 'fail'], false);
    expect(r.answers).toEqual(['X']);
    expect(r.code).toBe(status.RESOURCE_EXHAUSTED);
    expect(r.details).toBe('no room');
  });

  it('a handler that throws ends its own call with INTERNAL; the next call is served', async () => {
    const r = await converse(['throw'], false);
    expect(r.code).toBe(status.INTERNAL);
    expect(r.details).not.toContain('exploded');
    expect((await converse(['again'])).answers).toEqual(['AGAIN']);
  });

  it('cancelled by the peer: the handler is told', async () => {
    const call = client.chat();
    call.on('error', () => undefined);
    const first = new Promise((resolve) => call.once('data', resolve));
    call.write('gone');
    await first;
    call.cancel();
    await until('the cancel to reach the handler', () => seen.get('gone')?.includes('cancelled') === true);
    // grpc-js reports the reset stream's end as a half-close first (as it did to its own stream).
    const events = seen.get('gone') ?? [];
    expect(events[0]).toBe('message gone');
    expect(events.at(-1)).toBe('cancelled');
  });
});

describe('a unary call served from the call listener', () => {
  const askIt = (m: string, deadline?: number) =>
    new Promise<{ err: ServiceError | null; res?: string }>((resolve) => {
      const md = new Metadata();
      md.set('x-test', `md-${m}`);
      client.ask(m, md, deadline ? { deadline } : {}, (err, res) => resolve({ err, res }));
    });

  it('the request and its metadata in, the answer and OK out', async () => {
    const r = await askIt('hello');
    expect(r.err).toBeNull();
    expect(r.res).toBe('answer to hello');
    expect(seen.get('hello')).toEqual(['request hello metadata md-hello']);
  });

  it('a refusal is the status the handler gave', async () => {
    const r = await askIt('refuse');
    expect(r.err?.code).toBe(status.PERMISSION_DENIED);
    expect(r.err?.details).toBe('no');
  });

  it('a handler that throws answers INTERNAL', async () => {
    const r = await askIt('throw');
    expect(r.err?.code).toBe(status.INTERNAL);
  });

  it('past its deadline: the handler sees the call cancelled, and its late answer goes nowhere', async () => {
    // A deadline the request reaches the server well within, even on a loaded box.
    const r = await askIt('wait-deadline', Date.now() + 1_000);
    expect(r.err?.code).toBe(status.DEADLINE_EXCEEDED);
    // The server's own deadline (or the client's reset) may land a turn after the client gave up.
    await until('the server to see the deadline pass', () => waiting.get('wait-deadline')?.cancelled === true);
    held.get('wait-deadline')?.();
    expect(seen.get('wait-deadline')).toEqual(['request wait-deadline metadata md-wait-deadline', 'cancelled true']);
  });

  it('answered in time: not cancelled', async () => {
    const pending = askIt('wait-in-time');
    await until('the request to reach the handler', () => held.has('wait-in-time'));
    held.get('wait-in-time')?.();
    const r = await pending;
    expect(r.res).toBe('late');
    expect(seen.get('wait-in-time')).toContain('cancelled false');
  });

  it('a method not served directly runs its registered handler', async () => {
    const r = await new Promise<{ err: ServiceError | null; res?: string }>((resolve) => client.plain('x', (err, res) => resolve({ err, res })));
    expect(r.res).toBe('plain x');
  });
});
