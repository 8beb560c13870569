import { describe, expect, it } from 'vitest'
import { MAX_ENDED, MAX_OPEN_MS, RecentDispatches } from './recent-dispatches.ts'

describe('RecentDispatches', () => {
  it('adds the open requests started at or after the heartbeat, and every open one for a static node', () => {
    let t = 1000
    const log = new RecentDispatches(() => t)
    log.begin('n1')
    t = 2000
    log.begin('n1')
    log.begin('n2')
    expect(log.sinceHeartbeat('n1', 1500)).toBe(1) // the first was already running when the node beat at 1500
    expect(log.sinceHeartbeat('n1', 1000)).toBe(2)
    expect(log.sinceHeartbeat('n1', undefined)).toBe(2)
    expect(log.sinceHeartbeat('n2', 2000)).toBe(1)
    expect(log.sinceHeartbeat('n3', undefined)).toBe(0)
  })

  it('takes off the requests the heartbeat counted that have ended since, and no others', () => {
    let t = 1000
    const log = new RecentDispatches(() => t)
    const before = log.begin('n1')
    const also = log.begin('n1')
    t = 1500 // the node beats: it counts both
    t = 1600
    const after = log.begin('n1')
    t = 1700
    before.end()
    before.end()
    after.end() // started after the beat: never in its count
    expect(log.sinceHeartbeat('n1', 1500)).toBe(-1)
    // A request that ended before the beat is in neither count.
    expect(log.sinceHeartbeat('n1', 1800)).toBe(0)
    t = 1900
    also.end()
    expect(log.sinceHeartbeat('n1', 1800)).toBe(-1)
    expect(log.sinceHeartbeat('n1', undefined)).toBe(0)
  })

  it('moves a failed-over request to the node that answered, keeping its start', () => {
    let t = 1000
    const log = new RecentDispatches(() => t)
    const d = log.begin('n1')
    t = 1200
    d.moveTo('n2')
    expect(log.sinceHeartbeat('n1', undefined)).toBe(0)
    expect(log.sinceHeartbeat('n2', 1100)).toBe(0)
    expect(log.sinceHeartbeat('n2', 1000)).toBe(1)
    d.end()
    d.moveTo('n3')
    expect(log.sinceHeartbeat('n3', undefined)).toBe(0)
  })

  it('forgets a request whose end never came after MAX_OPEN_MS', () => {
    let t = 0
    const log = new RecentDispatches(() => t)
    log.begin('n1')
    t = MAX_OPEN_MS + 1
    expect(log.sinceHeartbeat('n1', undefined)).toBe(0)
  })

  it('keeps at most MAX_ENDED ended requests per node, however fast they come and whether or not the load is read', () => {
    let t = 1000
    const log = new RecentDispatches(() => t)
    for (let i = 0; i < 3 * MAX_ENDED; i++) log.begin('n1').end()
    t = 1001
    // Every one ended after the beat at 1000, having started... at it: none was open before it.
    expect(log.sinceHeartbeat('n1', 1000)).toBe(0)
    const open = Array.from({ length: 10 }, () => log.begin('n1'))
    t = 2000
    for (let i = 0; i < 3 * MAX_ENDED; i++) open[i % 10]!.end() // only the first ten end anything
    expect(log.sinceHeartbeat('n1', 1500)).toBe(-10)
  })
})
