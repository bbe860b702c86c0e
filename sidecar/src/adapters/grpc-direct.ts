import { status, type Metadata, type ServerInterceptingCall, type ServerInterceptingCallInterface, type ServerInterceptor } from '@grpc/grpc-js';

/**
 * gRPC calls served from grpc-js's own call listener (its public server
 * interceptor API), not through the Node stream grpc-js builds per call.
 *
 * For a registered method grpc-js makes a Node stream object per call (a
 * Duplex for a bidi call, a Writable even for a unary one) and moves every
 * message through it: a push, a 'data' event, a write and its callback, end
 * and finish handled a tick later. An interceptor sees the call underneath, a
 * listener with one callback per message and the calls that send. The
 * interceptors below take the methods they serve at that level: they start
 * the call with their own listener, so the handler grpc-js would have run and
 * the stream it would have built never exist. Everything else (the HTTP/2
 * stream, framing, the registered codecs, deadlines, message size limits,
 * cancellation) is still grpc-js's.
 */

type NextCall = ServerInterceptingCallInterface;
type CallListener = Parameters<NextCall['start']>[0];

/** A gRPC status an adapter ends a call with. */
export interface CallStatus {
  readonly code: status;
  readonly details: string;
}

/** One bidi call, as its handler writes to it. */
export interface BidiCall<Res> {
  write(res: Res): void;
  /** Ends the call with OK. After an end (or a fail) writes and ends are dropped. */
  end(): void;
  /** Ends the call with this status. */
  fail(s: CallStatus): void;
  /** end() or fail() was called. */
  readonly ended: boolean;
}

/** What a bidi handler is told, in order: each message, then the peer's half-close; or a cancel. */
export interface BidiReceiver<Req> {
  message(req: Req): void;
  /** The peer sends no more messages. */
  halfClosed(): void;
  /** The call is over: reset by the peer, past its deadline, or ended (after a status is sent, too). */
  cancelled(): void;
}

/** A unary call's request, metadata, and whether it is over (the peer reset it or its deadline passed). */
export interface UnaryCall<Req> {
  readonly request: Req;
  readonly metadata: Metadata;
  readonly cancelled: boolean;
}

/** A unary handler's answer: (null, response) or (status, null). */
export type UnaryRespond<Res> = (err: CallStatus | null, res: Res | null) => void;

const noop = (): void => undefined;

/**
 * Served below grpc-js's per-call stream (see the module comment). The call is
 * its own listener (the listener's methods and the call's do not share names):
 * no closures per call.
 */
abstract class DirectCall implements NextCall, CallListener {
  protected done = false;

  constructor(protected readonly next: NextCall) {}

  /** grpc-js's own listener (the one that would build the call's stream) is never started. */
  start(): void {
    this.next.start(this);
  }

  abstract onReceiveMetadata(metadata: Metadata): void;
  abstract onReceiveMessage(message: unknown): void;
  abstract onReceiveHalfClose(): void;
  abstract onCancel(): void;

  protected respond(res: unknown): void {
    if (this.done) return;
    this.next.sendMessage(res, noop);
  }

  protected close(s: CallStatus): void {
    if (this.done) return;
    this.done = true;
    this.next.sendStatus({ code: s.code, details: s.details, metadata: null });
  }

  sendMetadata(metadata: Metadata): void {
    this.next.sendMetadata(metadata);
  }
  sendMessage(message: unknown, callback: () => void): void {
    this.next.sendMessage(message, callback);
  }
  sendStatus(s: Parameters<NextCall['sendStatus']>[0]): void {
    this.next.sendStatus(s);
  }
  startRead(): void {
    this.next.startRead();
  }
  getPeer(): string {
    return this.next.getPeer();
  }
  getDeadline(): ReturnType<NextCall['getDeadline']> {
    return this.next.getDeadline();
  }
  getHost(): string {
    return this.next.getHost();
  }
  getAuthContext(): ReturnType<NextCall['getAuthContext']> {
    return this.next.getAuthContext();
  }
  getConnectionInfo(): ReturnType<NextCall['getConnectionInfo']> {
    return this.next.getConnectionInfo();
  }
  getMetricsRecorder(): ReturnType<NextCall['getMetricsRecorder']> {
    return this.next.getMetricsRecorder();
  }
}

const OK: CallStatus = { code: status.OK, details: 'OK' };
const FAILED: CallStatus = { code: status.INTERNAL, details: 'handler failed' };

class DirectBidi<Req, Res> extends DirectCall implements BidiCall<Res> {
  private receiver: BidiReceiver<Req> | null = null;

  constructor(
    next: NextCall,
    private readonly handler: BidiHandler<Req, Res>,
  ) {
    super(next);
  }

  get ended(): boolean {
    return this.done;
  }

  write(res: Res): void {
    this.respond(res);
  }

  end(): void {
    this.close(OK);
  }

  fail(s: CallStatus): void {
    this.close(s);
  }

  onReceiveMetadata(): void {
    try {
      this.receiver = this.handler(this);
    } catch {
      this.close(FAILED);
      return;
    }
    this.next.startRead();
  }

  // One message at a time, each handled before the next is asked for (asking first would
  // deliver a queued message inside this one's handling).
  onReceiveMessage(req: unknown): void {
    try {
      this.receiver?.message(req as Req);
    } catch {
      this.close(FAILED);
    }
    this.next.startRead();
  }

  onReceiveHalfClose(): void {
    this.receiver?.halfClosed();
  }

  onCancel(): void {
    this.done = true;
    this.receiver?.cancelled();
  }
}

class DirectUnary<Req, Res> extends DirectCall implements UnaryCall<Req> {
  private received: Req | null = null;
  private meta: Metadata | null = null;
  private over = false;
  private readonly answer: UnaryRespond<Res> = (err, res) => {
    if (err) this.close(err);
    else {
      // The status follows the message at once: grpc-js's own unary path waits for the
      // message's write callback, so the trailers Envoy's client completes on left a turn later.
      this.respond(res);
      this.close(OK);
    }
  };

  constructor(
    next: NextCall,
    private readonly handler: UnaryHandler<Req, Res>,
  ) {
    super(next);
  }

  get request(): Req {
    return this.received as Req;
  }
  get metadata(): Metadata {
    return this.meta as Metadata;
  }
  get cancelled(): boolean {
    return this.over;
  }

  onReceiveMetadata(metadata: Metadata): void {
    this.meta = metadata;
    this.next.startRead();
  }

  onReceiveMessage(req: unknown): void {
    if (this.received !== null) {
      this.close({ code: status.UNIMPLEMENTED, details: 'a second request message for a unary method' });
      return;
    }
    this.received = req as Req;
    this.next.startRead();
  }

  onReceiveHalfClose(): void {
    if (this.received === null) {
      this.close({ code: status.UNIMPLEMENTED, details: 'no request message for a unary method' });
      return;
    }
    try {
      this.handler(this, this.answer);
    } catch {
      this.close(FAILED);
    }
  }

  /** Past its deadline, reset by the peer, or (after its status) simply over: only the first two make it cancelled. */
  onCancel(): void {
    if (!this.done) this.over = true;
    this.done = true;
  }
}

export type BidiHandler<Req, Res> = (call: BidiCall<Res>) => BidiReceiver<Req>;
export type UnaryHandler<Req, Res> = (call: UnaryCall<Req>, respond: UnaryRespond<Res>) => void;

/** How one method's calls are served: a direct call made around grpc-js's own. */
export type DirectMethod = (next: NextCall) => NextCall;

export function directBidi<Req, Res>(handler: BidiHandler<Req, Res>): DirectMethod {
  return (next) => new DirectBidi(next, handler);
}

export function directUnary<Req, Res>(handler: UnaryHandler<Req, Res>): DirectMethod {
  return (next) => new DirectUnary(next, handler);
}

/**
 * The interceptor that serves these methods, by path ("/package.Service/Method");
 * every other method passes untouched. Each must still be registered with
 * grpc-js (addService): that is where its codecs and path come from; its
 * registered handler is never called.
 */
export function directCalls(byPath: Readonly<Record<string, DirectMethod>>): ServerInterceptor {
  const methods = new Map(Object.entries(byPath));
  // grpc-js declares its ServerInterceptingCall class as an interceptor's result; it uses only the interface.
  return (method, next) => (methods.get(method.path)?.(next) ?? next) as ServerInterceptingCall;
}
