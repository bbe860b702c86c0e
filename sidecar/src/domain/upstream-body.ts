import { isUtf8 } from 'node:buffer';
import type { Span } from './json-guard.js';

/**
 * The body sent to the provider, serialised once, with the UTF-8 size some of
 * its members take in it (the prompt material the credit hold is priced on).
 *
 * A member's value serialises inside its object exactly as it does alone, so
 * the size of the named members' values is the whole body minus the object
 * without them, minus each one's `"name":` and separating comma. Only the
 * small rest is serialised a second time, never the messages.
 *
 * When the caller's own bytes are at hand (`raw`) and every named member goes
 * up exactly as the caller sent it, those members are not serialised at all:
 * their bytes are copied from the request, after the rest (serialised once).
 */
export interface UpstreamBody {
  /** The body's bytes, as they go upstream. */
  readonly bytes: Buffer;
  /** UTF-8 size of the named members' values (absent ones count 0). */
  readonly memberBytes: number;
}

/**
 * Bodies smaller than this (a request, an embeddings answer) are serialised
 * whole: below it, copying costs more than it saves
 * (test/bench/admission-micro.ts).
 */
export const COPY_MIN_BYTES = 512;

/** The request as the caller sent it: its bytes, where its top-level members lie (json-guard.ts scanBody), and what JSON.parse made of them. */
export interface RawBody {
  readonly bytes: Buffer;
  readonly members: ReadonlyMap<string, Span>;
  readonly parsed: Readonly<Record<string, unknown>>;
}

export function upstreamBody(upstream: Readonly<Record<string, unknown>>, members: readonly string[], raw?: RawBody): UpstreamBody {
  return (raw && copied(upstream, members, raw)) || serialised(upstream, members);
}

function serialised(upstream: Readonly<Record<string, unknown>>, members: readonly string[]): UpstreamBody {
  const bytes = Buffer.from(JSON.stringify(upstream));
  const rest = withoutMembers(upstream, members);
  let framing = 0;
  for (const name of members) {
    if (Object.hasOwn(upstream, name) && upstream[name] !== undefined) framing += Buffer.byteLength(JSON.stringify(name)) + 2; // "name", the colon and the separating comma
  }
  if (framing === 0) return { bytes, memberBytes: 0 };
  // Something always remains (the model), so every named member had a comma beside it.
  return { bytes, memberBytes: bytes.length - Buffer.byteLength(JSON.stringify(rest)) - framing };
}

/**
 * The named members as the caller's bytes, after the rest: null unless each
 * one present goes up unchanged (the very value JSON.parse made of the
 * request) and the request is valid UTF-8 (JSON.parse read any invalid
 * sequence as U+FFFD, which serialising would send; the raw bytes would not).
 */
function copied(upstream: Readonly<Record<string, unknown>>, members: readonly string[], raw: RawBody): UpstreamBody | null {
  const spans: Span[] = [];
  const names: string[] = [];
  for (const name of members) {
    if (!Object.hasOwn(upstream, name) || upstream[name] === undefined) continue;
    const span = raw.members.get(name);
    if (!span || !Object.hasOwn(raw.parsed, name) || upstream[name] !== raw.parsed[name]) return null;
    spans.push(span);
    names.push(name);
  }
  if (spans.length === 0 || !isUtf8(raw.bytes)) return null;
  const head = JSON.stringify(withoutMembers(upstream, members));
  const parts: Buffer[] = [Buffer.from(head.slice(0, -1))];
  let memberBytes = 0;
  let separator = head.length > 2 ? ',' : '';
  for (let i = 0; i < spans.length; i++) {
    const [start, end] = spans[i] as Span;
    parts.push(Buffer.from(`${separator}${JSON.stringify(names[i])}:`), raw.bytes.subarray(start, end));
    memberBytes += end - start;
    separator = ',';
  }
  parts.push(Buffer.from('}'));
  return { bytes: Buffer.concat(parts), memberBytes };
}

/**
 * A plain object, not one without a prototype: JSON.stringify takes V8's fast
 * path only for the former (about 1 µs against 2 for a chat's rest). A member
 * named __proto__ (JSON.parse makes it an own property) is defined as an own
 * property, so it stays a member instead of setting the prototype.
 */
function withoutMembers(upstream: Readonly<Record<string, unknown>>, members: readonly string[]): Record<string, unknown> {
  const rest: Record<string, unknown> = {};
  for (const name of Object.keys(upstream)) {
    if (members.includes(name)) continue;
    if (name === '__proto__') Object.defineProperty(rest, name, { value: upstream[name], enumerable: true, writable: true, configurable: true });
    else rest[name] = upstream[name];
  }
  return rest;
}
