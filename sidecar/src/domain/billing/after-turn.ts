/**
 * Work that waits until the current turn of the event loop has ended, so
 * that the answers written in it have left first. Everything asked for during
 * one turn starts in one later callback, inside `together` (the ledger's: the
 * store commands those starts issue leave in one write instead of one each;
 * at 16 connections a turn ends with 3.6 settlements due on average, a probe
 * in docs/benchmark.md, session 16).
 */
export class AfterTurn {
  private due: Array<() => void> = [];

  constructor(private readonly together: (run: () => void) => void = (run) => run()) {}

  /** Starts `job` after this turn; settles as the job's promise does. */
  run<T>(job: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (this.due.length === 0) setImmediate(this.flush);
      this.due.push(() => {
        try {
          job().then(resolve, reject);
        } catch (err) {
          reject(err);
        }
      });
    });
  }

  private readonly flush = (): void => {
    const due = this.due;
    this.due = [];
    this.together(() => {
      for (const start of due) start();
    });
  };
}
