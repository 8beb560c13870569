import { describe, expect, it } from 'vitest'
import { NodeRow } from './node-row.ts'

const row = { id: 'us-east-1', url: 'http://10.0.0.1:9101', region: 'us-east', lat: 39, lon: -77.5, models: ['tiny'], maxBatch: 32, running: 1, waiting: 0, kvUsedFrac: 0.1, tokPerSec: 900, draining: false, ts: 1_800_000_000_000 }

describe('NodeRow', () => {
  it('reads a row without the optional prefix-cache figures, leaving them absent', () => {
    const parsed = NodeRow.parse(row)
    expect(parsed.prefillTokPerSec).toBeUndefined()
    expect(parsed.prefixHitRate).toBeUndefined()
    expect(JSON.stringify(parsed)).toBe(JSON.stringify(row))
  })

  it('reads prefillTokPerSec and prefixHitRate (numbers or numeric strings)', () => {
    expect(NodeRow.parse({ ...row, prefillTokPerSec: 2500, prefixHitRate: 0.75 })).toMatchObject({ prefillTokPerSec: 2500, prefixHitRate: 0.75 })
    expect(NodeRow.parse({ ...row, prefillTokPerSec: '2500', prefixHitRate: '0' })).toMatchObject({ prefillTokPerSec: 2500, prefixHitRate: 0 })
  })

  it('reads a malformed or out-of-range optional figure as absent, keeping the row', () => {
    for (const bad of [{ prefillTokPerSec: 0 }, { prefillTokPerSec: -5 }, { prefillTokPerSec: 'fast' }, { prefixHitRate: 1.5 }, { prefixHitRate: -0.1 }, { prefixHitRate: null }]) {
      const parsed = NodeRow.safeParse({ ...row, ...bad })
      expect(parsed.success).toBe(true)
      expect(parsed.data?.prefillTokPerSec).toBeUndefined()
      expect(parsed.data?.prefixHitRate).toBeUndefined()
    }
  })
})
