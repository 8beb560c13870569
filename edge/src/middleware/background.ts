/**
 * `c.var.waitUntil`: work that must outlive the response (a registry refresh, a token refund,
 * the latency record). On Workers it is the request's ExecutionContext.waitUntil, so the isolate
 * is kept alive for it; the Node entry passes its own (tracked so close() can await it). Rejections are swallowed here:
 * background work reports its own failures.
 */
import type { Around, Background } from '../context.ts'

export function backgroundWork(fallback?: Background): Around {
  return {
    before(c) {
      // An entry that passes its own (Node) never asks Hono: its executionCtx getter throws an
      // Error, stack trace and all, on every request without a Workers ExecutionContext.
      let platform = fallback
      if (!platform) {
        try {
          const ctx = c.executionCtx
          platform = (work) => ctx.waitUntil(work)
        } catch {
          // No ExecutionContext (app.request in tests): the promise simply runs.
        }
      }
      c.set('waitUntil', (work) => {
        const quiet = work.catch(() => {})
        if (platform) platform(quiet)
      })
    },
  }
}
