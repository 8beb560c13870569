import { spawnSync } from 'node:child_process'
import { describe, expect, it } from 'vitest'

describe('train.py: the forward the optimizer trains is the graph that ships', () => {
  it('the training forward and the export forward give the same float32 logits; swapping heads across KV groups does not', () => {
    const r = spawnSync('/usr/bin/python3', ['train_forward_check.py'], { cwd: 'gpu-node/tools/train-model', encoding: 'utf8' })
    expect(r.status, r.stderr).toBe(0)
    const { diff, control_diff: control, scale } = JSON.parse(r.stdout) as { diff: number; control_diff: number; scale: number }
    expect(diff).toBeLessThan(1e-4 * scale)
    expect(control).toBeGreaterThan(1e-2 * scale)
  }, 60_000)
})
