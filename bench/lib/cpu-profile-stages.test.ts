/** The stage breakdown of a V8 CPU profile that docs/PERFORMANCE.md's edge table is made from. */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { build } from 'esbuild'
import { describe, expect, it } from 'vitest'
import { stagesOf, withSources, type CpuProfile } from './cpu-profile-stages.ts'

const ROOT = 'file:///repo/'
// root → hono compose → validate.ts → zod (leaf); root → node:http parser (leaf); idle; GC.
const profile: CpuProfile = {
  nodes: [
    { id: 1, callFrame: { url: '', functionName: '(root)' }, children: [2, 5, 6, 7, 9] },
    { id: 2, callFrame: { url: `${ROOT}node_modules/hono/dist/compose.js`, functionName: 'dispatch' }, children: [3] },
    { id: 3, callFrame: { url: `${ROOT}edge/src/middleware/validate.ts`, functionName: '' }, children: [4] },
    { id: 4, callFrame: { url: `${ROOT}node_modules/zod/v4/core/schemas.js`, functionName: 'parse' }, children: [8] },
    { id: 5, callFrame: { url: 'node:_http_common', functionName: 'parserOnHeadersComplete' } },
    { id: 6, callFrame: { url: '', functionName: '(idle)' } },
    { id: 7, callFrame: { url: '', functionName: '(garbage collector)' } },
    { id: 8, callFrame: { url: `${ROOT}shared/src/dialects/openai-chat.ts`, functionName: 'toChatMessage' } },
    { id: 9, callFrame: { url: `${ROOT}node_modules/hono/dist/hono-base.js`, functionName: 'dispatch' } },
  ],
  samples: [4, 4, 8, 5, 6, 6, 6, 7, 9],
  timeDeltas: [100, 100, 100, 100, 100, 100, 100, 100, 100],
}

describe('CPU profile by edge stage', () => {
  it('charges a library frame to the innermost frame of ours above it, and the rest to their leaf; idle is left out', () => {
    const stages = stagesOf(profile)
    const share = Object.fromEntries(stages.map((s) => [s.stage, s.share]))
    // 6 busy samples: 3 under validate.ts (zod twice, our codec once), 1 HTTP parser, 1 GC, 1 Hono.
    expect(share['body read + validation']).toBeCloseTo(3 / 6)
    expect(share['Node internals (HTTP, streams, net)']).toBeCloseTo(1 / 6)
    expect(share['GC']).toBeCloseTo(1 / 6)
    expect(share['Hono (router, context, compose)']).toBeCloseTo(1 / 6)
    expect(stages[0]!.files).toEqual(['edge/src/middleware/validate.ts', 'shared/src/dialects/openai-chat.ts'])
    expect(stages.reduce((n, s) => n + s.samples, 0)).toBe(6)
  })

  it('moves the frames of a built module to the sources its map names, and leaves other frames alone', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'zl-prof-map-'))
    try {
      const out = join(dir, 'node.mjs')
      await build({ entryPoints: [join(import.meta.dirname, '..', '..', 'edge', 'src', 'within.ts')], outfile: out, bundle: true, format: 'esm', platform: 'node', sourcemap: true, logLevel: 'silent' })
      // Where V8 would report pollFor: the 0-based line and column of its declaration in the bundle.
      const lines = readFileSync(out, 'utf8').split('\n')
      const line = lines.findIndex((l) => l.includes('function pollFor('))
      const column = lines[line]!.indexOf('function pollFor(')
      const url = pathToFileURL(out).href
      const built: CpuProfile = {
        nodes: [
          { id: 1, callFrame: { url: '', functionName: '(root)' }, children: [2, 3] },
          { id: 2, callFrame: { url, functionName: 'pollFor', lineNumber: line, columnNumber: column } },
          { id: 3, callFrame: { url: 'node:_http_common', functionName: 'parserOnHeadersComplete', lineNumber: 7 } },
        ],
        samples: [2, 3],
        timeDeltas: [100, 100],
      }
      const mapped = withSources(built, out)
      expect(mapped.nodes[1]!.callFrame.url).toMatch(/edge\/src\/within\.ts$/)
      expect(mapped.nodes[2]!.callFrame).toEqual(built.nodes[2]!.callFrame)
      expect(stagesOf(mapped).map((s) => s.stage)).toContain('other edge code')
      // Unmapped, the bundle is nobody's stage: the sample goes to the runtime.
      expect(stagesOf(built).map((s) => s.stage)).not.toContain('other edge code')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
