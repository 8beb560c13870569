import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'

/**
 * Vitest strips types without checking them, so a test file can run green while `tsc` rejects
 * it: `npm test` runs the project's own `npm run typecheck` (every tsconfig) and fails on its errors.
 */
describe('typecheck', () => {
  it('every tsconfig of the project compiles without errors', async () => {
    const result = await promisify(execFile)('npm', ['run', '--silent', 'typecheck'], { cwd: new URL('../..', import.meta.url).pathname, maxBuffer: 16 << 20 }).then(
      () => ({ code: 0, out: '' }),
      (e: { code?: number; stdout?: string; stderr?: string }) => ({ code: e.code ?? 1, out: `${e.stdout ?? ''}${e.stderr ?? ''}` }),
    )
    expect(result.out.split('\n').filter((l) => /error TS\d+/.test(l))).toEqual([])
    expect(result.code).toBe(0)
  }, 180_000)
})
