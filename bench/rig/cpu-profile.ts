/**
 * Bench-only preload (`node --import ./bench/rig/cpu-profile.ts …`): V8's sampling CPU profiler
 * over a window the benchmark chooses, so a profile holds steady-state requests only (no start-up,
 * no warm-up, no tier-up). The first SIGUSR2 starts the profiler, the second stops it and writes
 * the profile (Chrome .cpuprofile JSON) to BENCH_CPU_PROFILE_OUT, then prints
 * {"msg":"cpu-profile written"}. Sampling interval: BENCH_CPU_PROFILE_INTERVAL_US (default 100).
 */
import { writeFileSync } from 'node:fs'
import { Session } from 'node:inspector'

const out = process.env.BENCH_CPU_PROFILE_OUT
if (!out) throw new Error('BENCH_CPU_PROFILE_OUT is required')
const session = new Session()
session.connect()
let running = false
const post = (method: string, params?: object) =>
  new Promise<any>((resolve, reject) => session.post(method, params ?? {}, (err, res) => (err ? reject(err) : resolve(res))))

process.on('SIGUSR2', () => {
  void (async () => {
    if (!running) {
      running = true
      await post('Profiler.enable')
      await post('Profiler.setSamplingInterval', { interval: Number(process.env.BENCH_CPU_PROFILE_INTERVAL_US ?? 100) })
      await post('Profiler.start')
      console.log(JSON.stringify({ msg: 'cpu-profile started' }))
      return
    }
    running = false
    const { profile } = await post('Profiler.stop')
    writeFileSync(out, JSON.stringify(profile))
    console.log(JSON.stringify({ msg: 'cpu-profile written' }))
  })()
})
