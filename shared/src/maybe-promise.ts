/**
 * `fn(value)` at once when `value` is already known, after it when it is a promise. For the
 * per-request paths whose parts answer synchronously on the Node entry (node:crypto's digests, a
 * cached key record) but not on Workers (Web Crypto): awaiting a known value would cost a promise
 * and a microtask turn each time.
 */
export function andThen<T, R>(value: T | Promise<T>, fn: (value: T) => R | Promise<R>): R | Promise<R> {
  return value instanceof Promise ? value.then(fn) : fn(value)
}
