import { describe, expect, it } from 'vitest';
import { categoryOf, inclusiveOurs, jsFrameName, nearestJs, ownerOf, parsePerfScript, shares, syscallOf } from '../../test/bench/perf-script.js';

// Four samples as `perf script` prints them (call chains leaf first; the JIT names come from --perf-basic-prof's map).
const TEXT = `node 100 [000]  10.000001:     500000 cpu-clock:
\t    7f0000001000 Builtins_LoadIC_Megamorphic+0x40 (/usr/bin/node)
\t    3d0000002000 JS:*writeFields file:///work/main/sidecar/src/adapters/envoy/wire-write.ts:1:2288 (/tmp/perf-100.map)
\t    3d0000003000 JS:*encodeLean file:///work/main/sidecar/src/adapters/envoy/check-response-encode.ts:1:1714 (/tmp/perf-100.map)
\t    3d0000004000 JS:*sendMessage /work/main/node_modules/@grpc/grpc-js/build/src/server-interceptors.js:663:16 (/tmp/perf-100.map)

node 100 [001]  10.000501:     500000 cpu-clock:
\tffffffff81000000 _raw_spin_unlock_irqrestore+0x19 ([kernel.kallsyms])
\tffffffff81000100 tcp_sendmsg+0x30 ([kernel.kallsyms])
\tffffffff81000200 ksys_write+0x60 ([kernel.kallsyms])
\t    3d0000005000 JS:*Socket._writeGeneric node:net:936:42 (/tmp/perf-100.map)
\t    3d0000006000 JS:*corked file:///work/main/sidecar/src/store/redis-connection.ts:1:4175 (/tmp/perf-100.map)

node 101 [000]  10.001001:     500000 cpu-clock:
\t    7f0000007000 v8::internal::Scavenger::ScavengeObject<v8::internal::FullHeapObjectSlot>+0x10 (/usr/bin/node)

node 100 [001]  10.001501:     500000 cpu-clock:
\t    3d0000008000 JS:~structBytes file:///work/main/sidecar/src/adapters/envoy/wire-write.ts:1:100 (/tmp/perf-100.map)
\t    3d0000003000 JS:*encodeLean file:///work/main/sidecar/src/adapters/envoy/check-response-encode.ts:1:1714 (/tmp/perf-100.map)
\t    3d0000009000 JS:*writeFields file:///work/main/sidecar/src/adapters/envoy/wire-write.ts:1:2288 (/tmp/perf-100.map)
`;

describe('perf script reading (perf-profile.ts)', () => {
  const samples = parsePerfScript(TEXT);

  it('reads each sample’s frames leaf first, without addresses, offsets or DSO', () => {
    expect(samples).toHaveLength(4);
    expect(samples[0]!.frames[0]).toBe('Builtins_LoadIC_Megamorphic');
    expect(samples[1]!.leafDso).toBe('[kernel.kallsyms]');
    expect(samples[2]!.frames).toEqual(['v8::internal::Scavenger::ScavengeObject<v8::internal::FullHeapObjectSlot>']);
  });

  it('says what the CPU was doing from the leaf', () => {
    expect(samples.map(categoryOf)).toEqual(['inline-cache misses (V8 load/store stubs)', 'the kernel', 'garbage collection (every thread)', 'JIT-compiled JavaScript']);
    expect(categoryOf({ frames: ['_int_malloc'], leafDso: '/lib/libc.so.6' })).toBe('malloc and free');
    expect(categoryOf({ frames: ['nghttp2_session_mem_recv2'], leafDso: '/usr/bin/node' })).toBe("nghttp2 and Node's HTTP/2");
    expect(categoryOf({ frames: ['Builtins_StringAdd_CheckNone'], leafDso: '/usr/bin/node' })).toBe('V8 builtins');
    expect(categoryOf({ frames: ['v8::internal::JsonParser<unsigned char>::ParseJson'], leafDso: '/usr/bin/node' })).toBe("V8's runtime and Node's C++");
    // Named from V8's code dump (--perf-prof) instead of the node binary's symbols.
    expect(categoryOf({ frames: ['Builtin:KeyedLoadIC_Megamorphic'], leafDso: '/tmp/x/jitted-1-386.so' })).toBe('inline-cache misses (V8 load/store stubs)');
    expect(categoryOf({ frames: ['Builtin:CallFunction_ReceiverIsAny'], leafDso: '/tmp/x/jitted-1-11.so' })).toBe('V8 builtins');
    expect(categoryOf({ frames: ['BytecodeHandler:GetNamedProperty'], leafDso: '/tmp/x/jitted-1-900.so' })).toBe("V8's interpreter");
    expect(categoryOf({ frames: ['v8::internal::compiler::GraphReducer::ReduceTop'], leafDso: '/usr/bin/node' })).toBe("V8's optimizing compilers");
  });

  it('counts stubs for the function that called them, and knows whose each function is', () => {
    expect(nearestJs(samples[0]!)).toContain('writeFields');
    expect(nearestJs(samples[2]!)).toBeNull();
    expect(jsFrameName(nearestJs(samples[0]!)!)).toBe('writeFields sidecar/src/adapters/envoy/wire-write.ts:1:2288');
    expect(jsFrameName('JS:*sendMessage /work/main/node_modules/@grpc/grpc-js/build/src/server-interceptors.js:663:16')).toBe('sendMessage @grpc/grpc-js/build/src/server-interceptors.js:663:16');
    expect(ownerOf(samples[0]!.frames[3]!)).toBe('@grpc/grpc-js');
    expect(ownerOf(samples[0]!.frames[1]!)).toBe('ours');
    expect(ownerOf(samples[1]!.frames[3]!)).toBe('Node');
  });

  it('names the system call a kernel sample is in', () => {
    expect(syscallOf(samples[1]!)).toBe('write');
    expect(syscallOf({ frames: ['finish_task_switch.isra.0'], leafDso: '[kernel.kallsyms]' })).toBe('interrupts and scheduling');
  });

  it('gives shares of all samples, largest first, and inclusive time counts a function once per sample', () => {
    expect([...shares(samples, categoryOf).values()].reduce((a, b) => a + b, 0)).toBeCloseTo(1);
    const mine = inclusiveOurs(samples);
    // encodeLean is on samples 1 and 4, writeFields on 1 and 4 (twice on 4: counted once).
    expect(mine.get('encodeLean sidecar/src/adapters/envoy/check-response-encode.ts:1:1714')).toBe(0.5);
    expect(mine.get('writeFields sidecar/src/adapters/envoy/wire-write.ts:1:2288')).toBe(0.5);
    expect(mine.get('corked sidecar/src/store/redis-connection.ts:1:4175')).toBe(0.25);
    expect([...mine.values()]).toEqual([...mine.values()].sort((a, b) => b - a));
  });
});
