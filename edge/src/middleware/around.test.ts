/** around.ts: the befores in order, the rest of the app, the afters in reverse, an error's answer included. */
import { Hono } from 'hono'
import { describe, expect, it } from 'vitest'
import type { AppEnv, Around } from '../context.ts'
import { around } from './around.ts'

function recording(calls: string[]) {
  const part = (name: string, after = true): Around => ({
    before: () => void calls.push(`${name} before`),
    ...(after ? { after: (c) => void calls.push(`${name} after ${c.res.status}`) } : {}),
  })
  const app = new Hono<AppEnv>()
  app.onError((_e, c) => c.text('refused', 418))
  app.use(around(part('outer'), part('middle', false), part('inner')))
  app.get('/ok', (c) => (calls.push('handler'), c.text('ok')))
  app.get('/refused', () => {
    calls.push('handler')
    throw new Error('no')
  })
  return app
}

describe('around', () => {
  it('runs the befores in order, then the app, then the afters in reverse', async () => {
    const calls: string[] = []
    const res = await recording(calls).request('/ok')
    expect(res.status).toBe(200)
    expect(calls).toEqual(['outer before', 'middle before', 'inner before', 'handler', 'inner after 200', 'outer after 200'])
  })

  it("gives the afters the answer app.onError made of a route's error", async () => {
    const calls: string[] = []
    const res = await recording(calls).request('/refused')
    expect(res.status).toBe(418)
    expect(calls).toEqual(['outer before', 'middle before', 'inner before', 'handler', 'inner after 418', 'outer after 418'])
  })
})
