/**
 * `c.var.waitUntil`: work that must outlive the response (a registry refresh, a token refund,
 * the latency record). On Workers it is the request's ExecutionContext.waitUntil, so the isolate
 * is kept alive for it; elsewhere (Node) the promise simply runs. Rejections are swallowed here:
 * background work reports its own failures.
 */
import type { MiddlewareHandler } from 'hono'
import type { AppEnv } from '../app-env.ts'

export function backgroundWork(fallback?: (work: Promise<unknown>) => void): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    let platform: ((work: Promise<unknown>) => void) | undefined
    try {
      const ctx = c.executionCtx
      platform = (work) => ctx.waitUntil(work)
    } catch {
      // Hono throws when there is no ExecutionContext (Node entry, app.request in tests).
      platform = fallback
    }
    c.set('waitUntil', (work) => {
      const quiet = work.catch(() => {})
      if (platform) platform(quiet)
    })
    return next()
  }
}
