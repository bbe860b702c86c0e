/**
 * The body sent to the provider, serialised once, with the UTF-8 size some of
 * its members take in it (the prompt material the credit hold is priced on).
 *
 * A member's value serialises inside its object exactly as it does alone, so
 * the size of the named members' values is the whole body minus the object
 * without them, minus each one's `"name":` and separating comma. Only the
 * small rest is serialised a second time, never the messages.
 */
export interface UpstreamBody {
  /** The body's bytes, as they go upstream. */
  readonly bytes: Buffer;
  /** UTF-8 size of the named members' values (absent ones count 0). */
  readonly memberBytes: number;
}

export function upstreamBody(upstream: Readonly<Record<string, unknown>>, members: readonly string[]): UpstreamBody {
  const bytes = Buffer.from(JSON.stringify(upstream));
  // No prototype: a member named __proto__ (JSON.parse makes it an own property) stays a member.
  const rest: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
  let framing = 0;
  for (const name of Object.keys(upstream)) {
    const value = upstream[name];
    if (!members.includes(name)) rest[name] = value;
    else if (value !== undefined) framing += Buffer.byteLength(JSON.stringify(name)) + 2; // "name", the colon and the separating comma
  }
  if (framing === 0) return { bytes, memberBytes: 0 };
  // Something always remains (the model), so every named member had a comma beside it.
  return { bytes, memberBytes: bytes.length - Buffer.byteLength(JSON.stringify(rest)) - framing };
}
