/**
 * What every request does before and after the rest of the app (its id and trace, its background
 * work, its log line and latency sample) as ONE middleware: each part is a pair of plain functions,
 * the befores in order, then the rest of the app, then the afters in reverse, as separate
 * middlewares nested in that order did. An answer the app made from an error (app.onError) is
 * c.res by then, as it was for them.
 *
 * Why: every Hono middleware is an async dispatch frame, a `next` closure and promises of its own
 * that live as long as the request, and at 64 requests in flight on one core what lives through a
 * young-generation collection is what the collection costs (docs/PERFORMANCE.md, "Where the
 * pinned c64 p99 goes"). pipeline.ts does the same for the generate route's checks.
 */
import type { MiddlewareHandler } from 'hono'
import type { AppEnv, Around } from '../context.ts'


export function around(...parts: Around[]): MiddlewareHandler<AppEnv> {
  const befores = parts.flatMap((p) => (p.before ? [p.before] : []))
  const afters = parts.flatMap((p) => (p.after ? [p.after] : [])).reverse()
  return async (c, next) => {
    for (const before of befores) before(c)
    await next()
    for (const after of afters) after(c)
  }
}
