import { StoreUnavailableError } from '../store/contract.js';

/**
 * Wraps a store or ledger so that each asynchronous operation reports its
 * duration and whether it failed (and whether the store was unreachable).
 * The store code itself stays unaware of metrics. Wrapped methods are built
 * once per method name, not per call.
 */
export function timedStore<T extends object>(target: T, report: (seconds: number, ok: boolean, unavailable: boolean) => void): T {
  const wrapped = new Map<PropertyKey, unknown>();
  return new Proxy(target, {
    get(obj, prop, receiver) {
      const value: unknown = Reflect.get(obj, prop, receiver);
      if (typeof value !== 'function' || prop === 'close' || prop === 'constructor') return value;
      let fn = wrapped.get(prop);
      if (!fn) {
        const method = value as (...args: unknown[]) => unknown;
        fn = function (this: unknown, ...args: unknown[]) {
          const t0 = performance.now();
          const out = method.apply(obj, args);
          if (!(out instanceof Promise)) return out;
          return out.then(
            (v: unknown) => {
              report((performance.now() - t0) / 1000, true, false);
              return v;
            },
            (err: unknown) => {
              report((performance.now() - t0) / 1000, false, err instanceof StoreUnavailableError);
              throw err;
            },
          );
        };
        wrapped.set(prop, fn);
      }
      return fn;
    },
  });
}
