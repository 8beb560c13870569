import { describe, expect, it } from 'vitest'
import { createNodeRegistry, MARK_DOWN_MS, MAX_TABLE_AGE_MS, TABLE_CACHE_MS, REGISTRY_TIMEOUT_MS } from './node-registry.ts'
import { allBusyForMs } from './pick-node.ts'

const row = (id: string, ts: number) => JSON.stringify({ id, url: `http://127.0.0.1:91${id.length}0`, region: id, lat: 0, lon: 0, models: ['tiny'], maxBatch: 8, running: 0, waiting: 0, kvUsedFrac: 0, tokPerSec: 0, draining: false, ts })

describe('node registry cache', () => {
  it('skips a failed node for MARK_DOWN_MS but a full one only for its retry hint, marked busy; all busy reads as a wait, not an outage', async () => {
    let now = 10_000
    const registry = createNodeRegistry({ redis: { hgetall: async () => ({ a: row('a', now), b: row('b', now) }) }, fallback: [], now: () => now })
    await registry.table()
    registry.markDown('a', 250)
    registry.markDown('b', 400)
    let nodes = (await registry.table()).nodes
    expect(nodes.map((n) => [n.downUntilMs, n.busy])).toEqual([[now + 250, true], [now + 400, true]])
    expect(allBusyForMs(nodes, 'tiny', now)).toBe(250)
    now += 251
    nodes = (await registry.table()).nodes
    expect(nodes[0]!.downUntilMs).toBeUndefined()
    expect(allBusyForMs(nodes, 'tiny', now)).toBeUndefined()
    // A failure: the full mark-down, not busy, and a table with it down is an outage.
    registry.markDown('a')
    nodes = (await registry.table()).nodes
    expect(nodes[0]).toMatchObject({ downUntilMs: now + MARK_DOWN_MS })
    expect(nodes[0]!.busy).toBeUndefined()
    expect(allBusyForMs(nodes, 'tiny', now)).toBeUndefined()
  })


  it('serves a recent table from cache and refreshes it in the background', async () => {
    let now = 10_000
    let reads = 0
    const registry = createNodeRegistry({ redis: { hgetall: async () => (reads++, { a: row('a', now) }) }, fallback: [], now: () => now })
    expect((await registry.table()).source).toBe('registry')
    now += TABLE_CACHE_MS
    const pending: Promise<unknown>[] = []
    await registry.table((p) => pending.push(p))
    await Promise.all(pending)
    expect(reads).toBe(2)
  })

  it('waits for a fresh table after the isolate sat idle, instead of routing on stale heartbeats', async () => {
    let now = 10_000
    const registry = createNodeRegistry({ redis: { hgetall: async () => ({ a: row('a', now) }) }, fallback: [], now: () => now })
    await registry.table()
    now += MAX_TABLE_AGE_MS + 30_000
    const table = await registry.table()
    expect(table.fetchedAtMs).toBe(now)
    expect(table.nodes[0].ts).toBe(now)
  })

  it('falls back to GPU_NODES when Redis fails', async () => {
    const registry = createNodeRegistry({
      redis: { hgetall: async () => Promise.reject(new Error('down')) },
      fallback: [{ id: 's', url: 'http://127.0.0.1:9101', region: 'us-east', lat: 39, lon: -77.5 }],
    })
    const table = await registry.table()
    expect(table).toMatchObject({ source: 'static', fallbackReason: 'registry_unreachable' })
    expect(table.nodes.map((n) => n.id)).toEqual(['s'])
  })
  // A waiter must not depend on a load another request started (Workers' I/O contexts), unless
  // the entry asks for shared loads (the Node entry: one long-lived process); uncoalesced, it
  // watches for the table that load stores, on its own timer.
  for (const coalesce of [false, true]) {
    it(`a burst that finds no table makes one load (${coalesce ? 'shared promise' : 'the others watch for its table'})`, async () => {
      let reads = 0
      let release!: () => void
      const gate = new Promise<void>((resolve) => (release = resolve))
      const registry = createNodeRegistry({ redis: { hgetall: async () => (reads++, await gate, { a: row('a', 10_000) }) }, fallback: [], now: () => 10_000, coalesce })
      const tables = Promise.all([registry.table(), registry.table(), registry.table()])
      release()
      expect((await tables).map((t) => t.nodes[0].id)).toEqual(['a', 'a', 'a'])
      expect(reads).toBe(1)
    })
  }

  it('uncoalesced: a waiter whose load never stores a table loads one itself, within the registry timeout', async () => {
    let reads = 0
    // The first load's answer never comes (on Workers: its request's context went away), and its
    // within() timeout is out of reach here (a long timeoutMs), so nothing is stored.
    const registry = createNodeRegistry({ redis: { hgetall: async () => (reads++ === 0 ? new Promise<never>(() => {}) : { a: row('a', 10_000) }) }, fallback: [], now: () => 10_000, timeoutMs: 60_000 })
    void registry.table()
    const started = Date.now()
    const table = await registry.table()
    expect(table.nodes[0].id).toBe('a')
    expect(reads).toBe(2)
    expect(Date.now() - started).toBeLessThan(REGISTRY_TIMEOUT_MS + 500)
  })
})
