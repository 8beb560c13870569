/**
 * Reads that ride on a Redis call a request makes anyway, instead of costing a round trip of
 * their own. The affinity memory (routing/affinity-memory.ts) needs one GET per request — where
 * was this conversation last served? — and the only Redis call on a request's path after its
 * body is parsed is the tokens/min charge (an EVALSHA of @upstash/ratelimit's token bucket). So:
 *
 * 1. before the charge, the request asks for its key (`ask(keyId, key)`);
 * 2. the token limiter's Redis client (`carryingReads`) sends each EVALSHA for that API key's
 *    bucket as a two-command pipeline `[EVALSHA …, GET key…]` — one HTTP request, one round trip —
 *    and delivers the GET values before the script's result returns;
 * 3. after the charge, the request withdraws what was not carried. The value (if it rode along)
 *    is then already in the memory; if the charge was decided without Redis (a lease,
 *    limits/leased-limit-store.ts) nothing was read and the request routes on what the isolate
 *    already knows. A request never waits for a read.
 *
 * Asks are keyed by API key id, so they ride on that key's own calls — including the joint call
 * that coalesced requests share on the Node entry — and on no other key's. The board holds plain
 * data shared by the requests of an isolate (safe on Workers: no promise crosses requests).
 */
export interface ReadAlong {
  /**
   * Asks for `key` to be read with the next tokens/min call of `keyId`. Returns the withdrawal:
   * call it once the charge is decided (a key already taken stays taken).
   */
  ask(keyId: string, key: string): () => void
}

export interface ReadAlongSource {
  /** The keys asked for alongside a call of `keyId`, removed from the board (each is read once). */
  take(keyId: string): string[]
  /** A value read along (null when the key does not exist). */
  deliver(key: string, value: unknown): void
}

/** Distinct keys carried on one call at most; more asks at once for one API key route without a read. */
export const MAX_READS_PER_CALL = 64

export function createReadAlong(deliver: (key: string, value: unknown) => void): ReadAlong & ReadAlongSource {
  const board = new Map<string, Set<string>>()
  return {
    ask(keyId, key) {
      let keys = board.get(keyId)
      if (!keys) board.set(keyId, (keys = new Set()))
      if (keys.size >= MAX_READS_PER_CALL) return () => {}
      keys.add(key)
      return () => {
        const now = board.get(keyId)
        if (!now) return
        now.delete(key)
        if (now.size === 0) board.delete(keyId)
      }
    },
    take(keyId) {
      const keys = board.get(keyId)
      if (!keys) return []
      board.delete(keyId)
      return [...keys]
    },
    deliver,
  }
}

/** What carryingReads needs of an @upstash/redis client. */
export interface ScriptRedis {
  evalsha(sha: string, keys: string[], args: unknown[]): Promise<unknown>
  pipeline(): ScriptPipeline
}

export interface ScriptPipeline {
  evalsha(sha: string, keys: string[], args: unknown[]): unknown
  get(key: string): unknown
  exec(options: { keepErrors: true }): Promise<Array<{ result: unknown; error?: string }>>
}

/**
 * `redis` with EVALSHA carrying the reads asked for alongside it: a script whose first key is an
 * API key's bucket (`keyIdOf` says whose) goes out as one pipeline with those GETs. Everything
 * else (EVAL after NOSCRIPT, other commands) is the client's own, untouched.
 */
export function carryingReads<R extends ScriptRedis>(redis: R, source: ReadAlongSource, keyIdOf: (scriptKeys: readonly string[]) => string | undefined): R {
  const carrying: R = Object.create(redis)
  carrying.evalsha = async (sha: string, keys: string[], args: unknown[]) => {
    const keyId = keyIdOf(keys)
    const reads = keyId === undefined ? [] : source.take(keyId)
    if (reads.length === 0) return redis.evalsha(sha, keys, args)
    const pipeline = redis.pipeline()
    pipeline.evalsha(sha, keys, args)
    for (const key of reads) pipeline.get(key)
    const [script, ...values] = await pipeline.exec({ keepErrors: true })
    values.forEach((v, i) => {
      if (!v.error) source.deliver(reads[i]!, v.result)
    })
    // The script's own failure is the caller's, as if it had gone alone: @upstash/ratelimit
    // answers NOSCRIPT with an EVAL (by then the reads have been delivered).
    if (!script) throw new ScriptError('empty pipeline answer')
    if (script.error) throw new ScriptError(script.error)
    return script.result
  }
  return carrying
}

/** A script that failed inside a carrying pipeline: the server's message only (never the command, which holds key hashes). */
export class ScriptError extends Error {
  override readonly name = 'UpstashError'
}
