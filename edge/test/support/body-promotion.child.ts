/**
 * Child of body-promotion.test.ts (its own process, so the heap is clean and the semi-space
 * small): makes `COUNT` streamed-answer bodies the way forward.ts does (a node body wrapped in
 * resumableBody, then passThrough), each reaching a ~2 kB graph through the node body, and drops
 * each at once, in batches across event loop turns. `control` makes the same graphs behind an
 * object literal with a per-call getter (the shape both bodies had): V8 keeps those through young
 * collections. It prints what the young collections moved into the old generation while it made
 * them, measured by V8's GCProfiler from after the imports (loading modules promotes ~8 MB).
 */
import { GCProfiler } from 'node:v8'
import { getDialect } from '../../../shared/src/dialects/index.ts'
import { streamEndsOf } from '../../src/proxy/frame-scanner.ts'
import { passThrough, type UpstreamBody } from '../../src/proxy/pass-through.ts'
import { resumableBody } from '../../src/proxy/resumable-body.ts'

const COUNT = 30_000
const BATCH = 1000
const WARM_UP = 10_000
const control = process.argv[2] === 'control'
const codec = getDialect('openai-chat')

function body(i: number): { readonly readable: unknown } {
  const graph = Array.from({ length: 40 }, (_, j) => ({ i, j }))
  const node: UpstreamBody = { body: null, pushTo: () => ({ resume() {}, cancel: () => void graph.pop() }) }
  if (control) {
    let made: unknown
    return { get readable() { return (made ??= graph) } }
  }
  return passThrough(resumableBody(node, { ends: streamEndsOf(codec), reopen: async () => undefined, maxResumes: 1, stallMs: 1000 }), { codec, sse: true, now: Date.now })
}

type Space = { spaceName: string; spaceUsedSize: number }
const oldSpace = (spaces: Space[]) => spaces.find((s) => s.spaceName === 'old_space')?.spaceUsedSize ?? 0

// A warm-up first: the first few thousand bodies promote ~2 MB of their own (feedback, compiled
// code's objects, module state) whichever the shape.
for (let i = 0; i < WARM_UP; i++) body(-1)
const profiler = new GCProfiler()
profiler.start()
let made = 0
const batch = () => {
  for (let i = 0; i < BATCH; i++) if (body(made++) === undefined) throw new Error('no body')
  if (made < COUNT) return void setImmediate(batch)
  const young = profiler.stop()!.statistics.filter((s) => s.gcType === 'Scavenge')
  const promoted = young.reduce((sum, s) => sum + oldSpace(s.afterGC.heapSpaceStatistics) - oldSpace(s.beforeGC.heapSpaceStatistics), 0)
  console.log(JSON.stringify({ made, scavenges: young.length, promoted }))
}
batch()
