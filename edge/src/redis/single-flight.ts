/**
 * Concurrent calls for the same key share one in-flight promise, so a burst that finds a cache
 * cold (an expired API key, say) costs one Redis round trip instead of one per request.
 *
 * For a long-lived process only (the Node entry). On Workers a promise started by one request's
 * I/O context cannot be relied on from another: if the first request ends early, the others may
 * wait on it forever.
 */
export function singleFlight<R>(fn: (key: string) => Promise<R>): (key: string) => Promise<R> {
  const inFlight = new Map<string, Promise<R>>()
  return (key) => {
    const pending = inFlight.get(key)
    if (pending) return pending
    const p = fn(key).finally(() => inFlight.delete(key))
    inFlight.set(key, p)
    return p
  }
}
