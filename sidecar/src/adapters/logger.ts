import pino, { type Logger } from 'pino';

/** The lines written once per request: buffered, so many share one write. */
export const PER_REQUEST_MESSAGES: ReadonlySet<string> = new Set(['request', 'request refused']);

/** Buffered per-request lines reach stdout at most this long after they were logged. */
export const LOG_FLUSH_MS = 100;

/** Buffered bytes that start a write at once (below sonic-boom's 16 KiB high-water mark). */
const BUFFER_BYTES = 4096;

/** Keys whose values are censored wherever they appear: at the top level, and one level down (`*.key`). */
const SECRET_KEYS = ['authorization', 'x-api-key', 'key', 'token'];
/** Keys censored at the top level only: what a request carries as its prompt. */
const CONTENT_KEYS = ['messages', 'input', 'prompt'];
const REDACTED_KEYS: ReadonlySet<string> = new Set([...SECRET_KEYS, ...CONTENT_KEYS]);

/**
 * True when redaction could not change this line's object: no key it censors
 * at the top level, and no object or array value for `*.key` to reach into.
 * (The per-request lines are like this: ids, counts, status, alias.)
 */
export function nothingToRedact(obj: unknown): boolean {
  if (obj === null || typeof obj !== 'object') return true;
  for (const k in obj) {
    const v = (obj as Record<string, unknown>)[k];
    if (REDACTED_KEYS.has(k) || (v !== null && typeof v === 'object')) return false;
  }
  return true;
}

/**
 * Structured JSON logs at the edges. Redaction is a second line of defence:
 * nothing that could hold a key, token or prompt is logged in the first place.
 * It is costly (pino runs it on every top-level value of a line because of
 * the `*.` paths: about 23 KB allocated per request for the per-request line
 * alone), so a line it could not change (`nothingToRedact`) is written by a
 * twin logger without it, to the same destination, in the same order.
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
  const destination = pino.destination({ dest: 1, sync: true, minLength: BUFFER_BYTES });
  // The flush timer runs only while a per-request line waits in the buffer (sonic-boom's own
  // periodic flush would wake an idle process every LOG_FLUSH_MS for an empty write).
  let timer: NodeJS.Timeout | null = null;
  /** Writes the buffer now (synchronously; `flushSync` would also fsync, which a file destination would feel per line). */
  const flush = () => {
    if (timer) clearTimeout(timer);
    timer = null;
    try {
      destination.flush();
    } catch {
      // closed: nothing more can be written
    }
  };
  const flushSoon = () => {
    if (timer) return;
    timer = setTimeout(flush, LOG_FLUSH_MS);
    timer.unref(); // an exit flushes anyway
  };
  const common = { name, level, base: { service: name }, timestamp: pino.stdTimeFunctions.isoTime };
  const plain = pino(common, destination);
  const logger: Logger = pino(
    {
      ...common,
      redact: {
        paths: [...SECRET_KEYS, ...SECRET_KEYS.map((k) => `*.${k}`), ...CONTENT_KEYS],
        censor: '[redacted]',
      },
      hooks: {
        logMethod(args, method, levelValue) {
          // A child's bindings live on the child: only the root's lines can go to the twin.
          if (this === logger && nothingToRedact(args[0])) {
            const label = plain.levels.labels[levelValue] as pino.Level;
            (plain[label] as (...a: unknown[]) => void)(...args);
          } else method.apply(this, args);
          const msg = typeof args[0] === 'string' ? args[0] : args[1];
          if (typeof msg !== 'string' || !PER_REQUEST_MESSAGES.has(msg)) flush();
          else flushSoon();
        },
      },
    },
    destination,
  );
  // The twin follows the root's level (a reload may change it).
  logger.on('level-change', (lvl: string, _val: number, _prevLvl: string, _prevVal: number, instance: Logger) => {
    if (instance === logger) plain.level = lvl;
  });
  // pino registers its exit flush only for asynchronous destinations.
  process.once('exit', flush);
  return logger;
}

/** Writes every line logged so far (the stop path, before the process exits). */
export function closeLogger(log: Logger): void {
  log.flush();
}
