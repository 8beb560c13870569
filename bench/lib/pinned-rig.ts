/**
 * What the pinned edge probes share (c64-gc-probe.ts, c64-survivors.ts, promotion-probe.ts): the
 * local Upstash bridge and redis, the instant upstream and this process (the load generator) on
 * core 1, so a proxy started on core 0 has that core to itself, as in the bench's pinned phases;
 * one keep-alive agent for the load; the bench key seeded. `own` hands a started proxy to `close`,
 * which stops everything, proxies first.
 */
import { randomBytes } from 'node:crypto'
import type { Agent } from 'undici'
import { benchAgent } from '../load/client.ts'
import { benchEdgeEnv, INSTANT_MODEL, seedBenchKey } from './bench-edge.ts'
import { pinSelf } from './procs.ts'
import { startInstantUpstream, startUpstashProcs, type EdgeProc, type LocalUpstashProcs } from './services.ts'

export interface PinnedRig {
  upstash: LocalUpstashProcs
  instant: EdgeProc
  agent: Agent
  /** The edge's environment: the rig's bridge, a fresh signing secret, the instant upstream as its one node. */
  edgeEnv: Record<string, string>
  own<P extends EdgeProc>(proxy: P): P
  close(): Promise<void>
}

export async function startPinnedRig(): Promise<PinnedRig> {
  const upstash = await startUpstashProcs({ cpus: '1' })
  const instant = await startInstantUpstream({ cpus: '1' })
  const unpin = pinSelf('1')
  const agent = benchAgent()
  const owned: EdgeProc[] = []
  const close = async () => {
    unpin()
    await agent.close()
    for (const p of owned.reverse()) await p.stop().catch(() => {})
    await instant.stop()
    await upstash.stop()
  }
  try {
    await seedBenchKey(upstash)
  } catch (e) {
    await close()
    throw e
  }
  return {
    upstash,
    instant,
    agent,
    edgeEnv: benchEdgeEnv(upstash, randomBytes(24).toString('hex'), [{ id: 'bench-instant', url: instant.url, model: INSTANT_MODEL }]),
    own(proxy) {
      owned.push(proxy)
      return proxy
    },
    close,
  }
}
