/**
 * Whether this instance takes new work. A normal stop turns it off first:
 * readiness answers 503 and new requests are refused with a 503 envelope,
 * while the admission checks and exchanges already under way run to their end.
 */
export class Lifecycle {
  private stopping = false;
  private checks = 0;

  get draining(): boolean {
    return this.stopping;
  }

  drain(): void {
    this.stopping = true;
  }

  /** Counts an admission check in flight (it may still place a hold). */
  track<T>(check: Promise<T>): Promise<T> {
    this.checks += 1;
    return check.finally(() => {
      this.checks -= 1;
    });
  }

  get checksInFlight(): number {
    return this.checks;
  }
}
