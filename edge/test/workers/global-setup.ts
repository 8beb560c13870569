/**
 * The workers project's world, started once in Node before workerd: a real redis-server behind
 * the local Upstash bridge, and the stand-in GPU node fleet. Their addresses reach the pool
 * options (bindings) through vitest's provide/inject.
 */
import type { TestProject } from 'vitest/node'
import { startLocalUpstash } from '../../../infra/local/local-upstash.ts'
import { startFleet } from '../support/stand-in-fleet.ts'

export const TEST_EDGE_SECRET = 'zl-test-edge-secret-0123456789'

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const upstash = await startLocalUpstash()
  const fleet = await startFleet({ secret: TEST_EDGE_SECRET })
  project.provide('upstashUrl', upstash.restUrl)
  project.provide('upstashToken', upstash.restToken)
  project.provide('gpuNodes', JSON.stringify(fleet.gpuNodes))
  project.provide('controlUrl', fleet.controlUrl)
  project.provide('deadUrl', fleet.deadUrl)
  return async () => {
    await fleet.close()
    await upstash.stop()
  }
}

declare module 'vitest' {
  export interface ProvidedContext {
    upstashUrl: string
    upstashToken: string
    gpuNodes: string
    controlUrl: string
    deadUrl: string
  }
}
