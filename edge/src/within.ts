/** Bounded waiting: a promise's outcome or a timeout, whichever comes first, without ever rejecting. */

export const TIMED_OUT = Symbol('timed out')

/**
 * The work's result, its error (always an Error), or TIMED_OUT. The work keeps running after a
 * timeout (pass it an AbortSignal to stop it); its late rejection is swallowed.
 */
export async function within<T>(timeoutMs: number, work: () => Promise<T>): Promise<T | Error | typeof TIMED_OUT> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const timeout = new Promise<typeof TIMED_OUT>((resolve) => {
    timer = setTimeout(() => resolve(TIMED_OUT), timeoutMs)
  })
  const attempt = Promise.resolve()
    .then(work)
    .catch((e: unknown) => (e instanceof Error ? e : new Error(String(e))))
  try {
    return await Promise.race([attempt, timeout])
  } finally {
    clearTimeout(timer)
  }
}

/** Whether something that started at `sinceMs` (0: nothing started) is less than `forMs` old at `at`. */
export function startedWithin(sinceMs: number, at: number, forMs: number): boolean {
  return sinceMs !== 0 && at - sinceMs < forMs
}

/** How often `pollFor` looks. */
export const POLL_MS = 2

/**
 * Waits, on the caller's own timer, for a value another request is producing into plain data:
 * on Workers a promise settled by one request's I/O may never settle for another, so none is
 * shared. Looks every POLL_MS while `coming()` says it may still come, for at most `maxMs`;
 * undefined when it did not (the caller then does the work itself). Counted in polls, not by a
 * clock, so an injected clock cannot stretch it.
 */
export async function pollFor<T>(read: () => T | undefined, coming: () => boolean, maxMs: number): Promise<T | undefined> {
  for (let polls = Math.ceil(maxMs / POLL_MS); polls > 0 && coming(); polls--) {
    await new Promise((resolve) => setTimeout(resolve, POLL_MS))
    const value = read()
    if (value !== undefined) return value
  }
  return undefined
}
