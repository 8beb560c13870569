/**
 * Bench-only preload for the GPU node process (`node --import tsx --import ./bench/rig/event-loop-delay.ts
 * gpu-node/src/main.ts`): a `perf_hooks.monitorEventLoopDelay` histogram on the node's main
 * thread — the thread that serves sockets — read and reset over the IPC channel the benchmark
 * opens. No product code is involved: the preload runs in the same thread before main.ts.
 *
 * The histogram records the interval between wake-ups of a `resolution`-ms timer; the delay
 * (lateness) reported is that interval minus the resolution.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks'

const resolutionMs = Number(process.env.BENCH_ELD_RESOLUTION_MS ?? 2)
const histogram = monitorEventLoopDelay({ resolution: resolutionMs })
histogram.enable()

const lateMs = (ns: number) => Math.max(0, ns / 1e6 - resolutionMs)

process.on('message', (msg: { type?: string; id?: number }) => {
  if (msg?.type === 'eld-reset') {
    histogram.reset()
    process.send?.({ type: 'eld-reset', id: msg.id })
  } else if (msg?.type === 'eld-read') {
    process.send?.({
      type: 'eld',
      id: msg.id,
      resolutionMs,
      count: histogram.count,
      p50: lateMs(histogram.percentile(50)),
      p90: lateMs(histogram.percentile(90)),
      p99: lateMs(histogram.percentile(99)),
      max: lateMs(histogram.max),
    })
  }
})
// The channel must not keep the node alive on its own (it drains and exits on SIGTERM).
process.channel?.unref()
