/**
 * The generate route's checks as ONE middleware: each step reads and sets the context and throws
 * its dialect-shaped ApiError to refuse (app.ts's onError answers it), in order, as separate
 * middlewares did. A step returns a promise only when it waits for something (the body, a store);
 * one that decides at once costs no promise, no await and no compose frame.
 *
 * Why: every Hono middleware is an async dispatch frame, a `next` closure and a promise of its own,
 * and the generate route had eleven of them in a row; the edge's CPU per request is what the
 * pinned latency targets measure (docs/PERFORMANCE.md).
 */
import type { Context, MiddlewareHandler } from 'hono'
import type { AppEnv } from '../app-env.ts'

/** One check of the request: void when decided at once, a promise when it waits. */
export type Step = (c: Context<AppEnv>) => void | Promise<void>

export function pipeline(...steps: Step[]): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    for (const step of steps) {
      const waiting = step(c)
      if (waiting) await waiting
    }
    return next()
  }
}
