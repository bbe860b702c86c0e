/**
 * Opaque transaction cursors: the id of the last entry of a page, wrapped so
 * clients treat it as opaque. A cursor that does not decode is invalid_cursor.
 */
const ENTRY_ID = /^\d{1,20}(-\d{1,20})?$/;

export function encodeCursor(entryId: string): string {
  return Buffer.from(JSON.stringify({ v: 1, before: entryId })).toString('base64url');
}

/** The entry id, or null when the text is not a cursor this service handed out. */
export function decodeCursor(text: string): string | null {
  if (!/^[A-Za-z0-9_-]{1,200}$/.test(text)) return null;
  try {
    const v = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as { v?: unknown; before?: unknown };
    return v && v.v === 1 && typeof v.before === 'string' && ENTRY_ID.test(v.before) ? v.before : null;
  } catch {
    return null;
  }
}
