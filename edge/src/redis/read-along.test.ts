import { describe, expect, it } from 'vitest'
import { carryingReads, createReadAlong, MAX_READS_PER_CALL, type ScriptPipeline, type ScriptRedis } from './read-along.ts'

/** A client that records what it sends: single EVALSHAs and pipelines. */
function fakeRedis(answer: (cmd: unknown[]) => { result: unknown; error?: string }) {
  const sent: unknown[][][] = []
  const redis: ScriptRedis & { other(): string } = {
    async evalsha(sha, keys, args) {
      sent.push([['EVALSHA', sha, ...keys, ...args]])
      const a = answer(['EVALSHA', sha, ...keys])
      if (a.error) throw new Error(a.error)
      return a.result
    },
    pipeline() {
      const cmds: unknown[][] = []
      const p: ScriptPipeline = {
        evalsha: (sha, keys, args) => cmds.push(['EVALSHA', sha, ...keys, ...args]),
        get: (key) => cmds.push(['GET', key]),
        exec: async () => {
          sent.push(cmds)
          return cmds.map(answer)
        },
      }
      return p
    },
    other: () => 'untouched',
  }
  return { redis, sent }
}

const bucketOf = (keys: readonly string[]) => (keys[0]?.startsWith('bucket:') ? keys[0].slice('bucket:'.length) : undefined)

describe('createReadAlong', () => {
  it('hands a key\'s asks to one call of that key only, once, and forgets withdrawn asks', () => {
    const board = createReadAlong(() => {})
    const withdrawA = board.ask('k1', 'zl:aff:a')
    board.ask('k1', 'zl:aff:b')
    board.ask('k1', 'zl:aff:b')
    board.ask('k2', 'zl:aff:c')
    withdrawA()
    expect(board.take('k1')).toEqual(['zl:aff:b'])
    expect(board.take('k1')).toEqual([])
    expect(board.take('k2')).toEqual(['zl:aff:c'])
    // Withdrawing after the key was taken changes nothing.
    const late = board.ask('k3', 'zl:aff:d')
    expect(board.take('k3')).toEqual(['zl:aff:d'])
    late()
    expect(board.take('k3')).toEqual([])
  })

  it('carries at most MAX_READS_PER_CALL keys for one API key at once', () => {
    const board = createReadAlong(() => {})
    for (let i = 0; i < MAX_READS_PER_CALL + 10; i++) board.ask('k', `zl:aff:${i}`)
    expect(board.take('k')).toHaveLength(MAX_READS_PER_CALL)
  })
})

describe('carryingReads', () => {
  it('sends a bucket\'s EVALSHA with the GETs asked for it as one pipeline and delivers them before returning', async () => {
    const delivered: Array<[string, unknown]> = []
    const board = createReadAlong((key, value) => delivered.push([key, value]))
    const { redis, sent } = fakeRedis((cmd) => (cmd[0] === 'GET' ? { result: cmd[1] === 'zl:aff:a' ? { region: 'r', node: 'n', at: 1 } : null } : { result: [5, 1000, 10] }))
    const carrying = carryingReads(redis, board, bucketOf)
    board.ask('k1', 'zl:aff:a')
    board.ask('k1', 'zl:aff:missing')
    board.ask('k2', 'zl:aff:other')
    const result = await carrying.evalsha('sha1', ['bucket:k1'], [10])
    expect(result).toEqual([5, 1000, 10])
    expect(sent).toEqual([[['EVALSHA', 'sha1', 'bucket:k1', 10], ['GET', 'zl:aff:a'], ['GET', 'zl:aff:missing']]])
    expect(delivered).toEqual([['zl:aff:a', { region: 'r', node: 'n', at: 1 }], ['zl:aff:missing', null]])
    // Another key's ask waits for that key's call; a call with nothing to carry goes alone.
    await carrying.evalsha('sha1', ['bucket:k3'], [1])
    expect(sent[1]).toEqual([['EVALSHA', 'sha1', 'bucket:k3', 1]])
    expect(board.take('k2')).toEqual(['zl:aff:other'])
    expect(carrying.other()).toBe('untouched')
  })

  it('leaves scripts on other keys alone', async () => {
    const board = createReadAlong(() => {})
    const { redis, sent } = fakeRedis(() => ({ result: 1 }))
    board.ask('k1', 'zl:aff:a')
    await carryingReads(redis, board, bucketOf).evalsha('sha', ['requests:k1'], [])
    expect(sent).toEqual([[['EVALSHA', 'sha', 'requests:k1']]])
    expect(board.take('k1')).toEqual(['zl:aff:a'])
  })

  it('fails as the script alone would (NOSCRIPT, so @upstash/ratelimit falls back to EVAL), after delivering the reads', async () => {
    const delivered: string[] = []
    const board = createReadAlong((key) => delivered.push(key))
    const { redis } = fakeRedis((cmd) => (cmd[0] === 'GET' ? { result: null } : { result: null, error: 'NOSCRIPT No matching script. Please use EVAL.' }))
    board.ask('k1', 'zl:aff:a')
    await expect(carryingReads(redis, board, bucketOf).evalsha('sha', ['bucket:k1'], [])).rejects.toThrow(/NOSCRIPT/)
    expect(delivered).toEqual(['zl:aff:a'])
  })
})
