/**
 * A node's answer as forward.ts reads it, fed chunk by chunk by the Node entry's upstreams
 * (h1-upstream.ts, h2-upstream.ts), which pause the socket or the HTTP/2 stream when `take` says
 * the consumer is full.
 */
import { NULL_BODY_STATUSES } from './forward-answer.ts'
import type { UpstreamHeaders, UpstreamResponse } from './upstream-fetch.ts'
import type { ChunkSink, PushedBody } from './pass-through.ts'
import { concatBytes } from '../bytes.ts'

/** Chunks a body holds before the upstream is paused, until someone reads it. */
const HELD_CHUNKS = 16

/**
 * A node's answer as forward.ts reads it. The body stays a list of chunks until one consumer
 * claims it: `arrayBuffer()` (a whole JSON answer) joins them; `pushTo()` (a token stream on the
 * Node entry) hands each chunk on as it comes; `body` builds a web stream. Whichever it is, a
 * consumer that is full pauses the upstream until it asks for more.
 */
export class UpstreamAnswer implements UpstreamResponse {
  private held: Uint8Array[] = []
  private sink: ChunkSink | undefined
  private outcome: { done: true } | { error: unknown } | undefined
  private paused = false
  private made: ReadableStream<Uint8Array> | undefined
  /** A status whose response has no body (fetch's `body` is null). */
  private readonly empty: boolean

  constructor(
    readonly status: number,
    readonly headers: UpstreamHeaders,
    private readonly resume: () => void,
    private readonly cancel: () => void,
  ) {
    this.empty = NULL_BODY_STATUSES.has(status)
  }

  get body(): ReadableStream<Uint8Array> | null {
    if (this.empty) return null
    if (this.made) return this.made
    this.made = new ReadableStream<Uint8Array>(
      {
        start: (controller) =>
          this.claim({
            chunk: (bytes) => {
              controller.enqueue(bytes)
              return (controller.desiredSize ?? 1) > 0
            },
            end: () => controller.close(),
            error: (err) => controller.error(err),
          }),
        pull: () => this.wake(),
        cancel: () => this.cancel(),
      },
      { highWaterMark: HELD_CHUNKS },
    )
    return this.made
  }

  arrayBuffer(): Promise<ArrayBuffer> {
    return new Promise<ArrayBuffer>((resolve, reject) => {
      const parts: Uint8Array[] = []
      this.claim({ chunk: (bytes) => parts.push(bytes) > 0, end: () => resolve(concatBytes(parts).buffer), error: reject })
    })
  }

  pushTo(sink: ChunkSink): PushedBody {
    this.claim(sink)
    return { resume: () => this.wake(), cancel: () => this.cancel() }
  }

  /** A chunk from the node; false pauses the upstream (socket or HTTP/2 stream). */
  take(chunk: Buffer): boolean {
    const bytes = new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength)
    if (this.sink) return this.flowing(this.sink.chunk(bytes))
    this.held.push(bytes)
    return this.flowing(this.held.length < HELD_CHUNKS)
  }

  complete(): void {
    this.outcome = { done: true }
    this.sink?.end()
  }

  fail(err: Error): void {
    this.outcome = { error: err }
    this.sink?.error(err)
  }

  /** The one consumer: what is held goes to it first, then the ending if the node already ended. */
  private claim(sink: ChunkSink): void {
    if (this.sink) throw new TypeError('the upstream body is already used')
    this.sink = sink
    if (this.empty) return sink.end()
    let more = true
    for (const bytes of this.held) more = sink.chunk(bytes)
    this.held = []
    if (this.outcome && 'error' in this.outcome) sink.error(this.outcome.error)
    else if (this.outcome) sink.end()
    else if (more) this.wake()
  }

  private flowing(more: boolean): boolean {
    this.paused = !more
    return more
  }

  private wake(): void {
    if (!this.paused) return
    this.paused = false
    this.resume()
  }
}
