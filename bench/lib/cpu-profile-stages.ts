/**
 * Where a process's CPU went, by stage of the edge's request path, from a V8
 * .cpuprofile (bench/rig/cpu-profile.ts). JIT-compiled code has no stable symbols for
 * callgrind, but V8's own sampler knows every JS frame's script. Each sample is charged to the
 * innermost frame in OUR code (edge/src, shared/src) on its stack, so a library called from a
 * stage (zod from validation, undici from the forward) counts as that stage; a sample with no
 * frame of ours goes to the library or runtime at its leaf (Hono's router, Node's HTTP parser,
 * undici's socket handling, GC). Idle samples are left out.
 */

import { readFileSync } from 'node:fs'
import { SourceMap } from 'node:module'
import { pathToFileURL } from 'node:url'

export interface CpuProfile {
  nodes: Array<{ id: number; callFrame: { url: string; functionName: string; lineNumber?: number; columnNumber?: number }; children?: number[] }>
  samples: number[]
  timeDeltas: number[]
}

export interface StageShare {
  stage: string
  /** Share of non-idle samples. */
  share: number
  samples: number
  /** Our files charged to this stage (for the doc), most samples first. */
  files: string[]
}

/** Our files by stage: the path fragment, then the stage it belongs to (first match wins). */
const OURS: Array<[RegExp, string]> = [
  [/edge\/src\/middleware\/(request-id|background|errors|pipeline)\.ts|shared\/src\/(trace-context|wire-headers)\.ts|edge\/src\/app\.ts/, 'request id, trace, app glue'],
  [/edge\/src\/latency\//, 'observation (log line, latency sample)'],
  [/edge\/src\/middleware\/content-type\.ts/, 'content type'],
  [/edge\/src\/middleware\/(auth|secret-compare)\.ts|edge\/src\/keys\/|shared\/src\/(api-key|digest|node-digest)\.ts/, 'auth (key hash, key cache)'],
  [/edge\/src\/middleware\/(rate-limit|requests-limit)\.ts|edge\/src\/limits\/|edge\/src\/redis\//, 'rate limits (requests/min, tokens/min)'],
  [/edge\/src\/middleware\/(validate|body-limit)\.ts|shared\/src\/(json-body|generation|api-error|clip-text)\.ts|shared\/src\/dialects\//, 'body read + validation'],
  [/edge\/src\/middleware\/affinity\.ts|edge\/src\/routing\/|edge\/src\/routes\//, 'routing + generate handler'],
  [/edge\/src\/proxy\/|shared\/src\/signature\.ts|edge\/src\/bytes\.ts/, 'forward (sign, upstream request, relay)'],
  [/edge\/src\/entries\//, 'Node entry (server glue)'],
  [/edge\/src\/|shared\/src\//, 'other edge code'],
]

const LEAF: Array<[(url: string, fn: string) => boolean, string]> = [
  [(_u, fn) => fn === '(garbage collector)', 'GC'],
  [(u) => /node_modules\/hono\//.test(u), 'Hono (router, context, compose)'],
  [(u) => /node_modules\/@hono\/node-server\//.test(u), '@hono/node-server adapter'],
  [(u) => /node_modules\/undici\//.test(u), 'undici (socket side, outside our frames)'],
  [(u) => /node_modules\//.test(u), 'other libraries'],
  [(u) => u.startsWith('node:'), 'Node internals (HTTP, streams, net)'],
  [(_u, fn) => fn === '(program)', 'V8/native, unattributed'],
]

/**
 * Where a V8 frame (url, 0-based line and column) of a built module (the Node edge as
 * infra/build/edge-node.ts builds it: one file) came from, by the source map beside it: the source
 * file and its 0-based line; undefined for a frame of another file or a position the map lacks.
 * `builtUrl`: the module's url in the profile (workerd names a Worker's module by its bare name).
 */
export function sourceLocator(module: string, builtUrl = pathToFileURL(module).href): (url: string, line: number, column: number) => { url: string; line: number } | undefined {
  const map = new SourceMap(JSON.parse(readFileSync(`${module}.map`, 'utf8')))
  return (url, line, column) => {
    if (url !== builtUrl) return undefined
    const at = map.findEntry(line, column)
    return 'originalSource' in at ? { url: at.originalSource, line: at.originalLine } : undefined
  }
}

/**
 * The profile of a built module with each of its frames moved to the source file and line its
 * source map names (sourceLocator), so that stages and functions are charged as they would be
 * from the sources.
 */
export function withSources(profile: CpuProfile, module: string, builtUrl?: string): CpuProfile {
  const locate = sourceLocator(module, builtUrl)
  const nodes = profile.nodes.map((n) => {
    const at = locate(n.callFrame.url, n.callFrame.lineNumber ?? 0, n.callFrame.columnNumber ?? 0)
    return at ? { ...n, callFrame: { ...n.callFrame, url: at.url, lineNumber: at.line } } : n
  })
  return { ...profile, nodes }
}

export function stageOf(url: string): string | undefined {
  for (const [re, stage] of OURS) if (re.test(url)) return stage
  return undefined
}

export function stagesOf(profile: CpuProfile): StageShare[] {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]))
  const parent = new Map<number, number>()
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
  const memo = new Map<number, { stage: string; file?: string } | null>()
  const charge = (id: number): { stage: string; file?: string } | null => {
    const hit = memo.get(id)
    if (hit !== undefined) return hit
    const leaf = byId.get(id)!
    if (leaf.callFrame.functionName === '(idle)') return memo.set(id, null), null
    let out: { stage: string; file?: string } | undefined
    for (let cur: number | undefined = id; cur !== undefined && !out; cur = parent.get(cur)) {
      const url = byId.get(cur)!.callFrame.url
      const stage = stageOf(url)
      if (stage) out = { stage, file: url.replace(/^.*?((edge|shared)\/src\/)/, '$1') }
    }
    if (!out) {
      const { url, functionName } = leaf.callFrame
      out = { stage: LEAF.find(([m]) => m(url, functionName))?.[1] ?? 'other (runtime)' }
    }
    memo.set(id, out)
    return out
  }
  const totals = new Map<string, { samples: number; files: Map<string, number> }>()
  let all = 0
  for (const id of profile.samples) {
    const c = charge(id)
    if (!c) continue
    all++
    const t = totals.get(c.stage) ?? { samples: 0, files: new Map() }
    t.samples++
    if (c.file) t.files.set(c.file, (t.files.get(c.file) ?? 0) + 1)
    totals.set(c.stage, t)
  }
  return [...totals.entries()]
    .map(([stage, t]) => ({ stage, samples: t.samples, share: all ? t.samples / all : 0, files: [...t.files.entries()].sort((a, b) => b[1] - a[1]).map(([f]) => f) }))
    .sort((a, b) => b.samples - a.samples)
}
