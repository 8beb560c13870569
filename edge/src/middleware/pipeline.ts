/**
 * The generate route's checks and its handler as ONE Hono handler: each step reads and sets the
 * context and throws its dialect-shaped ApiError to refuse (app.ts's onError answers it, and
 * around.ts then adds what every answer carries), in order, as separate middlewares did; then the
 * handler answers. A step returns a promise only when it waits for something (the body, a store);
 * one that decides at once costs no promise, no await and no compose frame.
 *
 * Why: every Hono middleware is an async dispatch frame, a `next` closure and a promise of its own,
 * and the generate route had eleven of them in a row, then the handler's own level; the edge's CPU
 * and live memory per request are what the pinned latency targets measure (docs/PERFORMANCE.md).
 */
import type { Context } from 'hono'
import type { AppEnv } from '../context.ts'

/** One check of the request: void when decided at once, a promise when it waits. */
export type Step = (c: Context<AppEnv>) => void | Promise<void>

export function pipeline(steps: Step[], handler: (c: Context<AppEnv>) => Promise<Response>): (c: Context<AppEnv>) => Promise<Response> {
  return async (c) => {
    for (const step of steps) {
      const waiting = step(c)
      if (waiting) await waiting
    }
    return handler(c)
  }
}
