import { describe, expect, it } from 'vitest'
import { affinityRedisKey, createAffinityMemory } from './affinity-memory.ts'

const TTL = 15 * 60_000

function memoryAt(start = 1_800_000_000_000, maxEntries?: number) {
  let t = start
  const writes: Array<{ key: string; value: unknown; px: number }> = []
  const background: Array<Promise<unknown>> = []
  const memory = createAffinityMemory({
    ttlMs: TTL,
    now: () => t,
    redis: { set: async (key, value, { px }) => void writes.push({ key, value: JSON.parse(value), px }) },
    ...(maxEntries ? { maxEntries } : {}),
  })
  return { memory, writes, background, bg: (w: Promise<unknown>) => void background.push(w), advance: (ms: number) => (t += ms), now: () => t }
}

describe('createAffinityMemory', () => {
  it('remembers a placement locally at once and writes it to Redis in the background with the TTL', async () => {
    const m = memoryAt()
    m.memory.remember('abc', { region: 'us-east', node: 'n1' }, m.bg)
    expect(m.memory.recall('abc')).toEqual({ region: 'us-east', node: 'n1', atMs: m.now() })
    await Promise.all(m.background)
    expect(m.writes).toEqual([{ key: 'zl:aff:abc', value: { region: 'us-east', node: 'n1', at: m.now() }, px: TTL }])
  })

  it('skips the write for the same placement within half a TTL, and writes a move or a refresh', () => {
    const m = memoryAt()
    m.memory.remember('abc', { region: 'us-east', node: 'n1' }, m.bg)
    m.advance(TTL / 2 - 1)
    m.memory.remember('abc', { region: 'us-east', node: 'n1' }, m.bg)
    expect(m.background).toHaveLength(1)
    m.memory.remember('abc', { region: 'us-east', node: 'n2' }, m.bg)
    expect(m.background).toHaveLength(2)
    m.advance(TTL / 2)
    m.memory.remember('abc', { region: 'us-east', node: 'n2' }, m.bg)
    expect(m.background).toHaveLength(3)
  })

  it('learns values read along with other calls (object or JSON string), newer wins, expired or malformed ignored', () => {
    const m = memoryAt()
    const at = m.now() - 1000
    m.memory.learn(affinityRedisKey('k1'), { region: 'eu-west', node: 'e1', at })
    expect(m.memory.recall('k1')).toEqual({ region: 'eu-west', node: 'e1', atMs: at })
    m.memory.learn(affinityRedisKey('k1'), JSON.stringify({ region: 'eu-west', node: 'e2', at: at + 500 }))
    expect(m.memory.recall('k1')?.node).toBe('e2')
    m.memory.learn(affinityRedisKey('k1'), { region: 'eu-west', node: 'older', at: at - 5000 })
    expect(m.memory.recall('k1')?.node).toBe('e2')
    for (const bad of [null, 'not json', { region: 'x' }, 42]) m.memory.learn(affinityRedisKey('k2'), bad)
    m.memory.learn(affinityRedisKey('k3'), { region: 'r', node: 'n', at: m.now() - TTL })
    m.memory.learn('zl:other:k4', { region: 'r', node: 'n', at })
    expect([m.memory.recall('k2'), m.memory.recall('k3'), m.memory.recall('k4')]).toEqual([undefined, undefined, undefined])
  })

  it('forgets a placement after the TTL, and the least recently learned first when full', () => {
    const m = memoryAt(1_800_000_000_000, 2)
    m.memory.remember('a', { region: 'r', node: 'n' }, m.bg)
    m.memory.remember('b', { region: 'r', node: 'n' }, m.bg)
    m.memory.remember('c', { region: 'r', node: 'n' }, m.bg)
    expect([m.memory.recall('a'), m.memory.recall('b')?.node, m.memory.recall('c')?.node]).toEqual([undefined, 'n', 'n'])
    m.advance(TTL)
    expect(m.memory.recall('b')).toBeUndefined()
  })

  it('works without Redis (an app built without it): this isolate only', () => {
    const memory = createAffinityMemory({ ttlMs: TTL })
    memory.remember('a', { region: 'r', node: 'n' }, () => {
      throw new Error('nothing to write')
    })
    expect(memory.recall('a')?.node).toBe('n')
  })
})
