import { createHash } from 'node:crypto'

/**
 * The automatic prefix cache's index (vLLM's automatic prefix caching, block-granular): which
 * blocks of `blockTokens` tokens have their KV kept, keyed by a hash chain over token ids —
 * block k's key hashes block k−1's key and block k's tokens, so a key names the whole prefix up
 * to its block's end, never text. The KV itself lives in the model worker, in the slot each
 * block is given here (runner.ts StepPlan `save`, PrefillPart `prefix`); this side decides
 * what is kept, so the two always agree.
 *
 * Eviction is LRU over blocks no sequence holds (refs 0). A sequence holds every block of its
 * prefix it reused or saved, from admission (or the save) until it leaves, as vLLM's running
 * sequences hold their blocks: a slot is never rewritten while a plan may still read it, and a
 * sequence's blocks are released together, last block first, so a chain is evicted from its
 * end and a surviving block has its parents.
 */
export interface CachedBlock {
  readonly hash: string
  /** The worker's storage slot for this block's KV. */
  readonly slot: number
  refs: number
}

export interface PrefixCacheStats {
  /** Prompt tokens looked up (vLLM's prefix_cache_queries). */
  queries: number
  /** Of those, tokens found cached (prefix_cache_hits). */
  hits: number
  evictions: number
}

export class PrefixCache {
  private readonly byHash = new Map<string, CachedBlock>()
  /** Blocks no sequence holds, least recently used first (a Map keeps insertion order). */
  private readonly idle = new Map<string, CachedBlock>()
  private nextSlot = 0
  readonly stats: PrefixCacheStats = { queries: 0, hits: 0, evictions: 0 }

  constructor(
    readonly blockTokens: number,
    /** Blocks that fit in the cache's own budget (PREFIX_CACHE_MB). */
    readonly capacityBlocks: number,
    /** Seeds the chain: the same tokens under another model are other keys. */
    private readonly root = '',
  ) {}

  get blocks(): number {
    return this.byHash.size
  }

  /**
   * Extends `chain` (the keys of tokens' first chain.length blocks) to every complete block of
   * tokens[0..upTo). The chain starts from the model and `salt` (the tenant): the same tokens
   * under another salt are other keys, so they never share blocks.
   */
  extendChain(chain: string[], tokens: readonly number[], upTo: number, salt = ''): void {
    const b = this.blockTokens
    while ((chain.length + 1) * b <= upTo) {
      const k = chain.length
      const ids = Int32Array.from(tokens.slice(k * b, (k + 1) * b))
      const parent = k === 0 ? `${this.root}\u0000${salt}` : chain[k - 1]
      chain.push(createHash('sha256').update(parent).update(new Uint8Array(ids.buffer)).digest('base64'))
    }
  }

  /** Cached blocks at the start of `chain`, leaving at least the prompt's last token to compute (its logits), without taking them. */
  peek(chain: readonly string[], promptLen: number): number {
    const most = Math.min(chain.length, Math.floor((promptLen - 1) / this.blockTokens))
    let k = 0
    while (k < most && this.byHash.has(chain[k])) k++
    return k
  }

  /** Takes the longest cached prefix of a prompt (see peek) for a sequence, counting the lookup. */
  acquire(chain: readonly string[], promptLen: number): CachedBlock[] {
    const blocks = chain.slice(0, this.peek(chain, promptLen)).map((h) => this.byHash.get(h)!)
    for (const block of blocks) {
      if (block.refs++ === 0) this.idle.delete(block.hash)
    }
    this.countLookup(promptLen, blocks.length * this.blockTokens)
    return blocks
  }

  /** Counts a prompt's lookup and the tokens it found (here, or in a donor row: scheduler.ts donorFor). */
  countLookup(promptLen: number, hitTokens: number): void {
    this.stats.queries += promptLen
    this.stats.hits += hitTokens
  }

  /** Gives blocks back, last first: unheld ones become the most recently used, a chain's end before its start. */
  release(blocks: readonly CachedBlock[]): void {
    for (let i = blocks.length - 1; i >= 0; i--) {
      const block = blocks[i]
      if (--block.refs === 0) this.idle.set(block.hash, block)
    }
  }

  /**
   * Holds the block `hash` for a sequence that has its KV: the cached block (`fresh` false), or a
   * new one (`fresh`: the caller has the worker save the KV into its slot) in the next unused
   * slot or the least recently used unheld block's, which is evicted. undefined when every
   * block is held.
   */
  hold(hash: string): { block: CachedBlock; fresh: boolean } | undefined {
    const known = this.byHash.get(hash)
    if (known) {
      if (known.refs++ === 0) this.idle.delete(hash)
      return { block: known, fresh: false }
    }
    let slot: number
    if (this.nextSlot < this.capacityBlocks) slot = this.nextSlot++
    else {
      const victim = this.idle.values().next().value
      if (!victim) return undefined
      this.idle.delete(victim.hash)
      this.byHash.delete(victim.hash)
      this.stats.evictions++
      slot = victim.slot
    }
    const block: CachedBlock = { hash, slot, refs: 1 }
    this.byHash.set(hash, block)
    return { block, fresh: true }
  }
}
