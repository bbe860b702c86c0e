import pino, { type Logger } from 'pino';

/**
 * Structured JSON logs at the edges. Redaction is a second line of defence:
 * nothing that could hold a key, token or prompt is logged in the first place.
 */
export function createLogger(level: string, name: string, opts: { sync?: boolean } = {}): Logger {
  // Asynchronous writes keep logging off the request path; flushed on close.
  const destination = pino.destination({ dest: 1, sync: opts.sync ?? false });
  return pino({
    name,
    level,
    base: { service: name },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: {
      paths: ['authorization', 'x-api-key', 'key', 'token', '*.authorization', '*.x-api-key', '*.key', '*.token', 'messages', 'input', 'prompt'],
      censor: '[redacted]',
    },
  }, destination);
}
