/**
 * Polls until `ok` holds; throws after `timeoutMs`. For a test that waits for
 * something asynchronous to have happened: a fixed sleep assumes the box is not
 * stalled meanwhile (a loaded CI box can keep a 5 ms sleep waiting for hundreds
 * of milliseconds), while a poll returns as soon as the condition holds and
 * only gives up after a deadline no healthy run comes near.
 */
export async function until(what: string, ok: () => boolean | Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
