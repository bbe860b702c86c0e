import { describe, expect, it } from 'vitest';
import { overFloor, roomOverFloor, targetsTable, type TargetRow } from '../../test/bench/summary.js';

const latency = (gateway: number, floor: number, limit = 1.5): TargetRow => ({ what: 'JSON c=1: added p50 over bare', gateway, floor, unit: 'ms', limit, atMost: true, added: true });
const rate: TargetRow = { what: 'JSON c=16: req/s, % of bare', gateway: 11, floor: 20, unit: '%', limit: 25, atMost: false };

describe('bench: the room the floor leaves on the latency rows', () => {
  it('gateway - floor is what the gateway adds; the bound minus the floor is what the floor leaves it', () => {
    expect(overFloor(latency(1.8, 1.2))).toBeCloseTo(0.6, 10);
    expect(roomOverFloor(latency(1.8, 1.2))).toBeCloseTo(0.3, 10);
    // The floor alone over the bound: no room at all.
    expect(roomOverFloor(latency(2.3, 2.2, 2))).toBeCloseTo(-0.2, 10);
  });

  it('rows that are not added latencies have neither', () => {
    expect(overFloor(rate)).toBeNaN();
    expect(roomOverFloor(rate)).toBeNaN();
  });

  it('the table prints both on latency rows and leaves them blank elsewhere', () => {
    const lines = targetsTable([latency(1.8, 1.2), rate]).split('\n');
    expect(lines[0]).toContain('gateway - floor');
    expect(lines[0]).toContain('room the floor leaves');
    expect(lines[2]).toMatch(/0\.600 ms\s+0\.300 ms\s*$/);
    expect(lines[3]).toMatch(/NOT met\s*$/);
  });
});
