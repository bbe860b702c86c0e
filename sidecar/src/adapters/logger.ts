import pino, { type Logger } from 'pino';

/** The lines written once per request: buffered, so many share one write. */
export const PER_REQUEST_MESSAGES: ReadonlySet<string> = new Set(['request', 'request refused']);

/** Buffered per-request lines reach stdout at most this long after they were logged. */
export const LOG_FLUSH_MS = 100;

/** Buffered bytes that start a write at once (below sonic-boom's 16 KiB high-water mark). */
const BUFFER_BYTES = 4096;

/**
 * Structured JSON logs at the edges. Redaction is a second line of defence:
 * nothing that could hold a key, token or prompt is logged in the first place.
 *
 * The per-request lines (PER_REQUEST_MESSAGES) are buffered: one write per
 * 4 KiB or per LOG_FLUSH_MS, not one system call per request. Every other line
 * (start-up, reloads, warnings, audit lines) flushes the buffer with it, so it
 * appears at once and in order. Writes are synchronous, as Node's own stdout
 * writes to a pipe are on Linux: nothing is ever half-way through a write in a
 * worker thread, so whatever is buffered when the process exits (pino flushes
 * on exit) is written whole and in order; closeLogger() on the stop path does
 * the same before the exit.
 */
export function createLogger(level: string, name: string): Logger {
  const destination = pino.destination({ dest: 1, sync: true, minLength: BUFFER_BYTES, periodicFlush: LOG_FLUSH_MS });
  /** Writes the buffer now (synchronously; `flushSync` would also fsync, which a file destination would feel per line). */
  const flush = () => {
    try {
      destination.flush();
    } catch {
      // closed: nothing more can be written
    }
  };
  const logger = pino(
    {
      name,
      level,
      base: { service: name },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: {
        paths: ['authorization', 'x-api-key', 'key', 'token', '*.authorization', '*.x-api-key', '*.key', '*.token', 'messages', 'input', 'prompt'],
        censor: '[redacted]',
      },
      hooks: {
        logMethod(args, method) {
          method.apply(this, args);
          const msg = typeof args[0] === 'string' ? args[0] : args[1];
          if (typeof msg !== 'string' || !PER_REQUEST_MESSAGES.has(msg)) flush();
        },
      },
    },
    destination,
  );
  // pino registers its exit flush only for asynchronous destinations.
  process.once('exit', flush);
  return logger;
}

/** Writes every line logged so far (the stop path, before the process exits). */
export function closeLogger(log: Logger): void {
  log.flush();
}
