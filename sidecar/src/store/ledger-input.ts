/** Input checks shared by the ledger implementations: bad input is a bug, refused before any write. */
export function assertAmount(v: number, what: string): void {
  if (!Number.isSafeInteger(v) || v < 0) throw new TypeError(`${what} must be a non-negative safe integer`);
}

export function assertId(v: string, what: string): void {
  if (typeof v !== 'string' || v.length === 0 || v.length > 256) throw new TypeError(`${what} must be a non-empty string`);
}

const DAY = /^\d{4}-\d{2}-\d{2}$/;

/** Every UTC day from `from` to `to` inclusive ("YYYY-MM-DD"); at most 400 days. */
export function daysBetween(from: string, to: string): string[] {
  if (!DAY.test(from) || !DAY.test(to)) throw new TypeError('days must be YYYY-MM-DD');
  const out: string[] = [];
  const end = Date.parse(`${to}T00:00:00Z`);
  for (let t = Date.parse(`${from}T00:00:00Z`); t <= end && out.length <= 400; t += 86_400_000) {
    out.push(new Date(t).toISOString().slice(0, 10));
  }
  return out;
}
