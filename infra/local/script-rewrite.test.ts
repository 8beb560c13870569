import { describe, expect, it } from 'vitest'
import { rewriteScript, ScriptRewriter, sha1Hex } from './script-rewrite.ts'

const UPSTASH_SCRIPT = '#!lua flags=allow-key-locking\n  return redis.call("GET", KEYS[1])\n'

describe('script rewrite', () => {
  it('drops a shebang whose only flag is allow-key-locking, keeping the line count', () => {
    const out = rewriteScript(UPSTASH_SCRIPT)
    expect(out).toBe('\n  return redis.call("GET", KEYS[1])\n')
    expect(out.split('\n')).toHaveLength(UPSTASH_SCRIPT.split('\n').length)
  })

  it('keeps the flags Redis 7.0 knows', () => {
    expect(rewriteScript('#!lua flags=no-writes,allow-key-locking\nreturn 1')).toBe('#!lua flags=no-writes\nreturn 1')
    expect(rewriteScript('#!lua flags=no-writes\nreturn 1')).toBe('#!lua flags=no-writes\nreturn 1')
    expect(rewriteScript('return 1')).toBe('return 1')
  })

  it('maps EVALSHA of the original script to the rewritten one after EVAL', () => {
    const rewriter = new ScriptRewriter()
    const originalSha = sha1Hex(UPSTASH_SCRIPT)
    expect(rewriter.rewrite(['evalsha', originalSha, '1', 'k'])).toEqual(['evalsha', originalSha, '1', 'k'])
    expect(rewriter.rewrite(['EVAL', UPSTASH_SCRIPT, '1', 'k'])[1]).toBe(rewriteScript(UPSTASH_SCRIPT))
    expect(rewriter.rewrite(['evalsha', originalSha, '1', 'k'])).toEqual(['evalsha', sha1Hex(rewriteScript(UPSTASH_SCRIPT)), '1', 'k'])
  })

  it('answers SCRIPT LOAD with the sha of what the client sent', () => {
    const rewriter = new ScriptRewriter()
    const args = ['script', 'load', UPSTASH_SCRIPT]
    expect(rewriter.rewrite(args)[2]).toBe(rewriteScript(UPSTASH_SCRIPT))
    expect(rewriter.originalShaFor(args)).toBe(sha1Hex(UPSTASH_SCRIPT))
    expect(rewriter.originalShaFor(['script', 'load', 'return 1'])).toBeUndefined()
  })
})
