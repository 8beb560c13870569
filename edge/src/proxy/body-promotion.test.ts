/**
 * A streamed answer's body objects must not keep the request alive through V8's young
 * collections. Object literals with a getter closure made per call did, in Node 20: every stream's
 * whole request graph was promoted to the old generation (~15 kB a request at c64), and the
 * young pauses tripled. The child process makes bodies
 * the way forward.ts does and counts, with V8's GCProfiler, what its young collections promoted;
 * the control makes the same graphs behind the old shape and shows the count can fail (the old
 * code itself, run through this child: 114 MB promoted for 30,000 bodies; the classes: ~6 kB).
 */
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'

const CHILD = join(import.meta.dirname, '../../test/support/body-promotion.child.ts')

/** Bytes V8's young collections promoted while the child made its bodies. */
function promotedBytes(mode: 'bodies' | 'control'): number {
  const run = spawnSync(process.execPath, ['--max-semi-space-size=4', '--import', 'tsx', CHILD, mode], { encoding: 'utf8', timeout: 60_000 })
  expect(run.status, run.stderr).toBe(0)
  const out = JSON.parse(run.stdout.trim().split('\n').at(-1)!) as { made: number; scavenges: number; promoted: number }
  expect(out.made).toBe(30_000)
  expect(out.scavenges).toBeGreaterThan(2)
  return out.promoted
}

describe('streamed-answer bodies and the young generation', () => {
  it('30,000 bodies dropped at once promote almost nothing; the per-call getter shape promotes their graphs', { timeout: 120_000 }, () => {
    const control = promotedBytes('control')
    const bodies = promotedBytes('bodies')
    // ~2 kB a graph, 60 MB made: the control promotes ~13 MB of it, the bodies a few kB.
    expect(control).toBeGreaterThan(5_000_000)
    expect(bodies).toBeLessThan(control / 20)
  })
})
