/**
 * One GPU node process (tiny model) for a test file, started before its tests and stopped after,
 * and the official `openai` SDK pointed at it (no retries: a test sees every answer).
 */
import OpenAI from 'openai'
import { afterAll, beforeAll } from 'vitest'
import { startGpuNode, type GpuNodeProcess } from './gpu-node-process.ts'

export interface OpenAINode {
  readonly node: GpuNodeProcess
  readonly client: OpenAI
}

export function openAINode(): OpenAINode {
  const held = {} as { node: GpuNodeProcess; client: OpenAI }
  beforeAll(async () => {
    held.node = await startGpuNode()
    held.client = new OpenAI({ apiKey: 'unused', baseURL: `${held.node.url}/v1`, maxRetries: 0 })
  })
  afterAll(async () => {
    await held.node?.stop()
  })
  return held
}
