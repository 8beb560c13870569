/**
 * Lua script compatibility between Upstash and redis-server 7.0.
 *
 * @upstash/ratelimit ≥ 2.1 starts its scripts with `#!lua flags=allow-key-locking`, an Upstash-only
 * flag that Redis 7.0 rejects (`ERR Unexpected flag in script shebang`). We drop that flag (and the
 * whole shebang line when it was the only flag, keeping the line count so error line numbers still
 * match) before EVAL / SCRIPT LOAD. The library calls EVALSHA with the sha1 of its ORIGINAL text,
 * so we remember original sha → rewritten sha and translate EVALSHA; an unknown sha passes through
 * and Redis answers NOSCRIPT, on which the library falls back to EVAL.
 */
import { createHash } from 'node:crypto'
import type { RespArg } from './resp-codec.ts'

const UPSTASH_ONLY_FLAGS = new Set(['allow-key-locking'])
/** Distinct scripts are few (one per algorithm); the cap only guards against a runaway client. */
const MAX_MAPPED_SCRIPTS = 10_000

export function sha1Hex(text: string | Buffer): string {
  return createHash('sha1').update(text).digest('hex')
}

/** The script Redis 7.0 accepts, or the same string when nothing needed changing. */
export function rewriteScript(script: string): string {
  const match = /^#!lua\b([^\n]*)/.exec(script)
  if (!match) return script
  const flagsMatch = /\bflags=(\S*)/.exec(match[1])
  if (!flagsMatch) return script
  const flags = flagsMatch[1].split(',').filter(Boolean)
  const kept = flags.filter((f) => !UPSTASH_ONLY_FLAGS.has(f))
  if (kept.length === flags.length) return script
  const rest = script.slice(match[0].length)
  if (kept.length > 0) return `#!lua flags=${kept.join(',')}${rest}`
  // No flags left: drop the shebang entirely so the script runs in the classic EVAL mode it was
  // written against (a bare `#!lua` would switch on the stricter shebang defaults).
  return rest
}

/** Rewrites script commands in place of their originals; keeps the sha map. */
export class ScriptRewriter {
  private readonly shaMap = new Map<string, string>()

  /** The command to send to Redis instead of `args` (the same array when nothing changes). */
  rewrite(args: RespArg[]): RespArg[] {
    const name = String(args[0] ?? '').toLowerCase()
    if ((name === 'eval' || name === 'eval_ro') && args.length >= 2) {
      return [args[0], this.register(String(args[1])), ...args.slice(2)]
    }
    if ((name === 'evalsha' || name === 'evalsha_ro') && args.length >= 2) {
      const mapped = this.shaMap.get(String(args[1]).toLowerCase())
      return mapped ? [args[0], mapped, ...args.slice(2)] : args
    }
    if (name === 'script' && args.length >= 3) {
      const sub = String(args[1]).toLowerCase()
      if (sub === 'load') return [args[0], args[1], this.register(String(args[2]))]
      if (sub === 'exists') return [args[0], args[1], ...args.slice(2).map((s) => this.shaMap.get(String(s).toLowerCase()) ?? s)]
    }
    return args
  }

  /**
   * SCRIPT LOAD answers the sha of what Redis stored; the client expects the sha of what it sent.
   * Returns the original sha for a rewritten script, undefined otherwise.
   */
  originalShaFor(args: readonly RespArg[]): string | undefined {
    if (String(args[0] ?? '').toLowerCase() !== 'script' || String(args[1] ?? '').toLowerCase() !== 'load') return undefined
    const original = String(args[2] ?? '')
    return rewriteScript(original) === original ? undefined : sha1Hex(original)
  }

  private register(script: string): string {
    const rewritten = rewriteScript(script)
    if (rewritten !== script) {
      if (this.shaMap.size >= MAX_MAPPED_SCRIPTS) this.shaMap.clear()
      this.shaMap.set(sha1Hex(script), sha1Hex(rewritten))
    }
    return rewritten
  }
}
