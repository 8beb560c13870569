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
