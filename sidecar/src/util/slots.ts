/**
 * Values held in the slots of an array that only grows (to the most values
 * ever held at once), a freed slot emptied and reused; whoever adds a value
 * keeps its slot to remove it. For per-request registrations on the request
 * path: a Set or Map that gains and loses an entry per request rebuilds its
 * table every few dozen requests, and a dropped table that had lived long
 * enough to be promoted keeps pointing at what it held until the next full
 * collection, so every scavenge kept those requests alive and promoted them
 * (docs/benchmark.md, session 18).
 */
export class Slots<T> {
  private readonly values: Array<T | undefined> = [];
  private readonly free: number[] = [];
  private count = 0;

  /** Values held now. */
  get size(): number {
    return this.count;
  }

  /** Holds `value`; the slot returned removes it again (delete). */
  add(value: T): number {
    const slot = this.free.pop() ?? this.values.length;
    this.values[slot] = value;
    this.count++;
    return slot;
  }

  /** Empties `slot` if it still holds `value` (not if it was emptied, or reused since). */
  delete(slot: number, value: T): void {
    if (this.values[slot] !== value) return;
    this.values[slot] = undefined;
    this.free.push(slot);
    this.count--;
  }

  /** Calls `fn` with every value held and its slot; `fn` may delete the value it is given. */
  forEach(fn: (value: T, slot: number) => void): void {
    // A slot emptied during the walk keeps the array's length; values added during it are not visited.
    for (let slot = 0, n = this.values.length; slot < n; slot++) {
      const value = this.values[slot];
      if (value !== undefined) fn(value, slot);
    }
  }
}
