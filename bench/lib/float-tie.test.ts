import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { GREEDY } from '../../gpu-node/src/engine/types.ts'
import { readModelDir, type ModelDir } from '../../gpu-node/src/model/model-dir.ts'
import { ModelTokenizer } from '../../gpu-node/src/model/tokenizer.ts'
import { openEditedEngine } from '../../gpu-node/test/support/edited-engine.ts'
import { generateModel } from '../../gpu-node/tools/generate-model/generate-model.ts'
import { greedySplit, TIE } from './float-tie.ts'

/**
 * The bench's tie rule (float-tie.ts) on a real graph: where another decoder's ids part from our
 * greedy text it finds the token, and reads from the graph whether that token was a tie with the
 * top logit (its gap then 0: the same token) or a real difference.
 */

const root = mkdtempSync(join(tmpdir(), 'zerolayer-float-tie-'))
let dir: ModelDir
let tok: ModelTokenizer
let prompt: number[]
let greedy: number[]
beforeAll(async () => {
  await generateModel({ preset: 'tiny', outDir: root, seed: 42 })
  dir = readModelDir(root)
  tok = new ModelTokenizer(dir)
  prompt = tok.encodeText('The quick brown fox jumps over')
  const { engine } = await openEditedEngine(dir)
  greedy = await new Promise<number[]>((resolve) => {
    const ids: number[] = []
    engine.submit({ id: 'g', promptTokens: prompt, maxTokens: 12, stop: [], sampling: GREEDY, priority: 0, ignoreEos: true }, (e) => {
      if (e.type === 'text') ids.push(...e.tokens)
      if (e.type === 'finish') resolve(ids)
    })
  })
  await engine.close()
}, 60_000)
afterAll(() => rmSync(root, { recursive: true, force: true }))

describe('greedySplit', () => {
  it('finds no split when the texts are equal', async () => {
    expect(await greedySplit(dir, tok, prompt, tok.decode(greedy), greedy)).toEqual({ tie: false })
  })

  it('calls a token far below the top logit a real difference', async () => {
    const at = 5
    const theirs = [...greedy.slice(0, at), (greedy[at]! + 1) % dir.config.vocabSize, ...greedy.slice(at + 1)]
    const split = await greedySplit(dir, tok, prompt, tok.decode(greedy), theirs)
    expect(split.at).toBe(at)
    expect(split.gap).toBeGreaterThan(TIE)
    expect(split.tie).toBe(false)
  })

  it("calls the top token itself a tie (where our text alone went elsewhere)", async () => {
    const at = 5
    const ours = tok.decode(greedy.slice(0, at)) + '\u0000different'
    const split = await greedySplit(dir, tok, prompt, ours, greedy)
    expect(split).toEqual({ at, gap: 0, tie: true })
  })
})
