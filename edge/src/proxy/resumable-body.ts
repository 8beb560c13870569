/**
 * One client stream over one or more node streams (DESIGN.md §4 "Resume"). Bytes pass through
 * whole frames at a time (frame-scanner.ts); when the node's stream breaks, ends before the
 * dialect's final frame, or sends nothing for `stallMs`, the stream is continued on another node
 * (`reopen`, handed the delivered tokens) and its frames are piped on into the SAME response.
 * After `maxResumes` continuations, or when no node takes one, the body fails and pass-through
 * ends it with today's single dialect error event.
 *
 * It is an UpstreamBody: pass-through.ts reads it exactly like a node's body, pushed (the Node
 * entry's relay) or as a web stream (Workers).
 */
import { FrameScanner, type StreamEnds } from './frame-scanner.ts'
import { webStreamOfPushed, type ChunkSink, type PushedBody, type UpstreamBody } from './pass-through.ts'

export type ResumeOutcome = 'resumed' | 'exhausted' | 'no_node'

export interface ResumeOptions {
  /** How the client's dialect ends a stream (frame-scanner.ts streamEndsOf). */
  ends: StreamEnds
  /** Opens the continuation after `delivered` on the next node; undefined when none answered in time. */
  reopen(delivered: readonly number[], flushed: boolean): Promise<UpstreamBody | undefined>
  maxResumes: number
  /** No bytes from the node for this long (while the client is reading) counts as its death. */
  stallMs: number
  /** Each resume attempt's outcome (a metric and the request's log line). */
  onResume?(outcome: ResumeOutcome): void
}

export interface ResumableBody extends UpstreamBody {
  /** Continuations started so far. */
  readonly resumes: number
}

export function resumableBody(first: UpstreamBody, opts: ResumeOptions): ResumableBody {
  let resumes = 0
  const pushTo = (out: ChunkSink): PushedBody => {
    const scanner = new FrameScanner(opts.ends)
    let current: PushedBody | undefined
    let generation = 0
    let cancelled = false
    let paused = false
    // One timer per stall period, not one per chunk: a chunk only notes the time, and the timer,
    // when it fires early, waits out the rest of the period from the last chunk (a clearTimeout
    // and setTimeout per chunk were a tenth of the relay's CPU).
    let stall: ReturnType<typeof setTimeout> | undefined
    let lastChunkAt = 0
    const disarm = () => {
      clearTimeout(stall)
      stall = undefined
    }
    const check = (gen: number) => {
      stall = undefined
      if (gen !== generation || cancelled) return
      // A client that is not reading is no stall of the node: look again later (resume() restarts the clock).
      if (paused) return void (stall = setTimeout(check, opts.stallMs, gen))
      const quietMs = Date.now() - lastChunkAt
      if (quietMs >= opts.stallMs) failed(gen)
      else stall = setTimeout(check, opts.stallMs - quietMs, gen)
    }
    const arm = () => {
      lastChunkAt = Date.now()
      if (stall === undefined && !cancelled) stall = setTimeout(check, opts.stallMs, generation)
    }
    const attach = (up: UpstreamBody) => {
      const gen = ++generation
      disarm()
      arm()
      current = sourceOf(up, {
        chunk(bytes) {
          if (gen !== generation) return true
          arm()
          const frames = scanner.push(bytes)
          if (frames.byteLength === 0 || out.chunk(frames)) return true
          // The client is full: its slowness is no stall of the node (the timer stays, and skips).
          paused = true
          return false
        },
        end() {
          if (gen !== generation) return
          if (scanner.finalSeen) {
            generation++
            disarm()
            out.end()
          } else failed(gen)
        },
        error() {
          failed(gen)
        },
      })
    }
    const failed = (gen: number) => {
      if (gen !== generation || cancelled) return
      generation++
      disarm()
      current?.cancel(new Error('the node stream failed; resuming elsewhere'))
      // The final frame already went out: the answer is whole, whatever its connection does next
      // (a drained node exits right after its last frame; its stream can reset before it ends).
      // A continuation now would send a second finish and [DONE].
      if (scanner.finalSeen) return out.end()
      scanner.dropPartial()
      if (resumes >= opts.maxResumes) {
        opts.onResume?.('exhausted')
        out.error(new Error('upstream failed and resumes are exhausted'))
        return
      }
      resumes++
      const mine = generation
      opts.reopen(scanner.delivered, scanner.flushed).then(
        (up) => {
          if (cancelled || mine !== generation) {
            // The client left while the continuation was being opened: close it at once.
            up?.body?.cancel().catch(() => {})
            return
          }
          if (!up) {
            opts.onResume?.('no_node')
            out.error(new Error('no node could continue the stream'))
            return
          }
          opts.onResume?.('resumed')
          attach(up)
        },
        () => {
          if (!cancelled && mine === generation) out.error(new Error('resume failed'))
        },
      )
    }
    attach(first)
    return {
      resume() {
        paused = false
        arm()
        current?.resume()
      },
      cancel(reason) {
        cancelled = true
        disarm()
        current?.cancel(reason)
      },
    }
  }
  return new ResumingBody(pushTo, () => resumes)
}

/**
 * A class, not an object literal with per-call getters: those kept each stream's whole graph
 * alive through young collections in V8 (see RelayedBody in pass-through.ts).
 */
class ResumingBody implements ResumableBody {
  private web: ReadableStream<Uint8Array> | undefined
  constructor(
    readonly pushTo: (out: ChunkSink) => PushedBody,
    private readonly count: () => number,
  ) {}

  get resumes(): number {
    return this.count()
  }

  get body(): ReadableStream<Uint8Array> {
    return (this.web ??= webStreamOfPushed(this.pushTo))
  }
}

/** A node body as pushed chunks: its own pushTo (Node entry), else a reader loop over its web stream. */
function sourceOf(up: UpstreamBody, sink: ChunkSink): PushedBody {
  if (up.pushTo) return up.pushTo(sink)
  if (!up.body) {
    queueMicrotask(() => sink.end())
    return { resume() {}, cancel() {} }
  }
  const reader = up.body.getReader()
  let wake: (() => void) | undefined
  let stopped = false
  void (async () => {
    try {
      for (;;) {
        const r = await reader.read()
        if (stopped) return
        if (r.done) return sink.end()
        if (!sink.chunk(r.value)) await new Promise<void>((resolve) => (wake = resolve))
      }
    } catch (e) {
      if (!stopped) sink.error(e)
    }
  })()
  return {
    resume() {
      const w = wake
      wake = undefined
      w?.()
    },
    cancel(reason) {
      stopped = true
      reader.cancel(reason).catch(() => {})
      this.resume()
    },
  }
}
