import type { ServerResponse } from 'node:http';

/**
 * Writes a piece of a chunked response and sends it at once, as its own
 * network write. Node holds a chunked write back for the rest of the tick so
 * that the tick's writes leave together: Node 22 corks the socket, Node 24
 * also corks the response and keeps the chunk in the response's own buffer
 * (where uncorking the socket alone does not reach it, and a socket destroyed
 * in the same tick loses it). Both are undone here. Returns what write()
 * returned (false: wait for 'drain').
 */
export function writeNow(res: ServerResponse, piece: string | Uint8Array): boolean {
  const ok = res.write(piece);
  if (res.writableCorked > 0) res.uncork();
  res.socket?.uncork();
  return ok;
}
