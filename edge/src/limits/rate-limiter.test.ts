import { describe, expect, it } from 'vitest'
import { withFailurePolicy, type LimitStore } from './rate-limiter.ts'
import type { LimitDecision } from '../context.ts'

const allow: LimitDecision = { success: true, limit: 10, remaining: 9, resetAtMs: 0 }

function store(behaviour: 'ok' | 'throw' | 'hang'): LimitStore {
  const act = async (): Promise<LimitDecision> => {
    if (behaviour === 'throw') throw new Error('ECONNREFUSED')
    if (behaviour === 'hang') return new Promise<LimitDecision>(() => {})
    return allow
  }
  return { requests: act, tokens: act, peekTokens: act, refund: async () => void (await act()) }
}

describe('withFailurePolicy', () => {
  it('passes the store decision through', async () => {
    const limiter = withFailurePolicy(store('ok'), { mode: 'closed', timeoutMs: 50 })
    expect(await limiter.checkRequests('k', 10)).toEqual(allow)
    expect(limiter.failureCount()).toBe(0)
  })

  for (const mode of ['open', 'closed'] as const) {
    it(`decides a failing store by mode=${mode} at once`, async () => {
      const limiter = withFailurePolicy(store('throw'), { mode, timeoutMs: 10_000 })
      const started = Date.now()
      const d = await limiter.checkRequests('k', 10)
      expect(Date.now() - started).toBeLessThan(100)
      expect(d).toMatchObject({ success: mode === 'open', degraded: true })
      expect(limiter.failureCount()).toBe(1)
    })

    it(`decides a hung store by mode=${mode} within the timeout`, async () => {
      const limiter = withFailurePolicy(store('hang'), { mode, timeoutMs: 50 })
      const started = Date.now()
      const d = await limiter.chargeTokens('k', 100, 5)
      const took = Date.now() - started
      expect(took).toBeGreaterThanOrEqual(45)
      expect(took).toBeLessThan(500)
      expect(d).toMatchObject({ success: mode === 'open', degraded: true })
    })
  }

  it('never throws from a refund, and counts the lost one', async () => {
    const limiter = withFailurePolicy(store('throw'), { mode: 'open', timeoutMs: 50 })
    await expect(limiter.refundTokens('k', 100, 5)).resolves.toBeUndefined()
    expect(limiter.failureCount()).toBe(1)
  })
})
