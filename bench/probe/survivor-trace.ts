/**
 * Bench-only preload: V8's sampling heap profiler keeping only what outlived a young-generation
 * collection (`includeObjectsCollectedByMinorGC: false`; objects a full collection freed later are
 * kept too), so its samples are the bytes a scavenge had to copy, by allocation site. The first
 * SIGUSR2 starts it, the second writes the profile (Chrome .heapprofile JSON) to
 * SURVIVOR_TRACE_OUT and prints {"msg":"survivor-trace written"}. No product hook.
 */
import { writeFileSync } from 'node:fs'
import { Session } from 'node:inspector'

const out = process.env.SURVIVOR_TRACE_OUT
if (!out) throw new Error('SURVIVOR_TRACE_OUT is required')
const session = new Session()
session.connect()
let started = false
process.on('SIGUSR2', () => {
  if (!started) {
    started = true
    // Node 20's @types lack the two include* parameters; V8 11.3 takes them.
    const params = { samplingInterval: 512, includeObjectsCollectedByMinorGC: false, includeObjectsCollectedByMajorGC: true }
    session.post('HeapProfiler.startSampling', params as object, () => console.log(JSON.stringify({ msg: 'survivor-trace started' })))
    return
  }
  session.post('HeapProfiler.getSamplingProfile', (err, res) => {
    if (!err) writeFileSync(out, JSON.stringify(res.profile))
    console.log(JSON.stringify({ msg: 'survivor-trace written' }))
  })
})
