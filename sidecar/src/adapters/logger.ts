import pino, { type Logger } from 'pino';

/**
 * Structured JSON logs at the edges. Redaction is a second line of defence:
 * nothing that could hold a key, token or prompt is logged in the first place.
 */
export function createLogger(level: string, name: string): Logger {
  return pino({
    name,
    level,
    base: { service: name },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: {
      paths: ['authorization', 'x-api-key', 'key', 'token', '*.authorization', '*.x-api-key', '*.key', '*.token', 'messages', 'input', 'prompt'],
      censor: '[redacted]',
    },
  });
}
