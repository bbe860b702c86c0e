/**
 * Reads `perf script` output (samples with call chains, leaf first) into the
 * shares perf-profile.ts prints. Pure: unit-tested on text of the same form.
 *
 * A sample is a header line (`node 123 [001] 45.678: 500000 cpu-clock:`) and
 * one line per frame (`\t7f0a... Symbol+0x1f (dso)`); samples are separated
 * by a blank line. With Node's `--perf-basic-prof` JIT-compiled functions
 * appear as `JS:*name file:///path:line:col` (`*` optimized, `^` baseline,
 * `~` interpreted).
 */

export interface Sample {
  /** Frames, leaf first, without addresses, offsets and DSO. */
  readonly frames: readonly string[];
  /** The DSO of the leaf frame (`[kernel.kallsyms]`, a path, or a perf map). */
  readonly leafDso: string;
}

const FRAME = /^\s*[0-9a-f]+\s+(.*?)(?:\+0x[0-9a-f]+)?\s+\(([^)]*)\)\s*$/;

export function parsePerfScript(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const block of text.split(/\n\s*\n/)) {
    const lines = block.split('\n').filter((l) => l.trim() !== '');
    if (lines.length < 2) continue;
    const frames: string[] = [];
    let leafDso = '';
    for (const line of lines.slice(1)) {
      const m = FRAME.exec(line);
      if (!m) continue;
      if (frames.length === 0) leafDso = m[2] ?? '';
      frames.push(m[1] ?? '');
    }
    if (frames.length) samples.push({ frames, leafDso });
  }
  return samples;
}

/**
 * What the leaf of a sample is: where the CPU was when the sample was taken.
 * V8's builtins and stubs are `Builtins_X` in the node binary's own symbols
 * and `Builtin:X` when named from V8's code dump (`--perf-prof`).
 */
export function categoryOf(s: Sample): string {
  const leaf = s.frames[0] ?? '';
  if (s.leafDso.includes('kernel')) return 'the kernel';
  const builtin = /^(?:Builtins_|Builtin:)(\w+)/.exec(leaf)?.[1];
  if (builtin !== undefined && /^(Keyed)?(Load|Store|Define|Has)\w*IC|ICTrampoline|^LoadGlobalIC/.test(builtin)) return 'inline-cache misses (V8 load/store stubs)';
  if (/v8::internal::(Scaveng|Marking|MarkCompact|ConcurrentMarking|Sweeper|Heap::|Evacuat|MemoryAllocator|PagedSpace|RememberedSet|SlotSet|GCTracer|MinorMark|LargeObjectSpace|FreeList|HeapObject::SizeFromMap|BodyDescriptorBase)/.test(leaf)) {
    return 'garbage collection (every thread)';
  }
  if (/v8::internal::(compiler::|maglev::)/.test(leaf)) return "V8's optimizing compilers";
  if (/^(_int_malloc|malloc|_int_free|cfree@?\S*|free|unlink_chunk\S*|malloc_consolidate|operator new|operator delete)/.test(leaf)) return 'malloc and free';
  if (leaf.includes('nghttp2') || leaf.includes('node::http2::')) return "nghttp2 and Node's HTTP/2";
  if (leaf.startsWith('JS:')) return 'JIT-compiled JavaScript';
  if (builtin !== undefined) return 'V8 builtins';
  if (leaf.startsWith('BytecodeHandler:')) return "V8's interpreter";
  if (/^uv_|^uv__/.test(leaf)) return 'libuv';
  return "V8's runtime and Node's C++";
}

/**
 * A JIT frame's function and where it lives: `name path:line:column` (ours
 * relative to sidecar/src, packages by name). The column stays: tsx compiles
 * each of our files to one line, so two functions of a file differ only there.
 */
export function jsFrameName(frame: string): string {
  const m = /^JS:[*^~]?(\S*)\s+(\S+)$/.exec(frame);
  if (!m) return frame;
  const where = (m[2] ?? '')
    .replace(/^file:\/\//, '')
    .replace(/^.*\/(sidecar\/src\/)/, '$1')
    .replace(/^.*\/node_modules\//, '');
  return `${m[1] || '(anonymous)'} ${where}`;
}

/** Who owns a JIT frame: ours, a package, or Node itself. */
export function ownerOf(frame: string): string {
  if (frame.includes('/sidecar/src/')) return 'ours';
  const pkg = /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(frame);
  if (pkg) return pkg[1] ?? 'a package';
  if (/\snode:/.test(frame)) return 'Node';
  return 'other';
}

/** The nearest JIT frame of a sample (builtins, stubs and the runtime count for the function that called them), or null. */
export function nearestJs(s: Sample): string | null {
  return s.frames.find((f) => f.startsWith('JS:')) ?? null;
}

/** The system call a kernel sample is in, or the interrupts and scheduling it shows when in none. */
export function syscallOf(s: Sample): string {
  for (const f of s.frames) {
    const m = /^(?:__x64_sys_|__arm64_sys_|ksys_|do_sys_)(\w+)/.exec(f);
    if (m) return m[1] ?? f;
  }
  return 'interrupts and scheduling';
}

/** Share (0..1) of samples by key; keys with none are absent. */
export function shares(samples: readonly Sample[], key: (s: Sample) => string | null): Map<string, number> {
  const counts = new Map<string, number>();
  for (const s of samples) {
    const k = key(s);
    if (k !== null) counts.set(k, (counts.get(k) ?? 0) + 1);
  }
  const total = samples.length || 1;
  return new Map([...counts].sort((a, b) => b[1] - a[1]).map(([k, n]) => [k, n / total]));
}

/** Share (0..1) of samples whose stack holds each function of ours at least once (inclusive time). */
export function inclusiveOurs(samples: readonly Sample[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const s of samples) {
    const seen = new Set<string>();
    for (const f of s.frames) if (f.startsWith('JS:') && ownerOf(f) === 'ours') seen.add(jsFrameName(f));
    for (const k of seen) counts.set(k, (counts.get(k) ?? 0) + 1);
  }
  const total = samples.length || 1;
  return new Map([...counts].sort((a, b) => b[1] - a[1]).map(([k, n]) => [k, n / total]));
}
