/**
 * The node's body as the client's body: chunks pass through untouched. Two endings need the edge:
 * - the upstream breaks after bytes were sent: an SSE stream ends with ONE dialect error event
 *   (the codec's, renderStreamError) so SDKs raise an error instead of hanging or seeing a silent
 *   end; a JSON body is errored (the client sees a truncated response, never a wrong one);
 * - the client leaves: the cancel runs back through the pipe and cancels the upstream body,
 *   which closes the node's stream (the node then aborts the sequence and frees its KV).
 *
 * Two ways to carry it, same endings: a web ReadableStream (what a Response body is: Workers), or
 * — when the upstream pushes chunks (the Node entry's upstreams) — a direct relay into the
 * Node server's response (`relay`, kept with the Response: forwarded-response.ts), which skips
 * both web streams and their promise per chunk.
 */
import { ApiError } from '../../../shared/src/api-error.ts'
import type { DialectCodec } from '../../../shared/src/dialects/index.ts'
import { renderStreamError } from '../../../shared/src/error-body.ts'
import type { BodyOutcome } from '../context.ts'

export interface PassThroughOptions {
  /** Shapes the error event of a stream that breaks. */
  codec: DialectCodec
  /** The body is text/event-stream (an error event may be appended). */
  sse: boolean
  now: () => number
}

/** Receives a pushed body, chunk by chunk, then exactly one of end() or error(). */
export interface ChunkSink {
  /** false: the sink is full; the source waits for resume(). */
  chunk(bytes: Uint8Array): boolean
  end(): void
  error(err: unknown): void
}

/** A body being pushed into a ChunkSink. */
export interface PushedBody {
  resume(): void
  /** Stops the upstream (the client left). */
  cancel(reason: Error): void
}

/** A node's body as pass-through reads it: a web stream, and optionally pushed chunks. */
export interface UpstreamBody {
  readonly body: ReadableStream<Uint8Array> | null
  /** Pushes the body into `sink` instead (then `body` must not be read). */
  pushTo?(sink: ChunkSink): PushedBody
}

/** Where a Node entry writes a relayed body: its HTTP/1.1 or HTTP/2 ServerResponse. */
export interface RelayOut {
  write(chunk: Uint8Array): boolean
  end(): void
  destroy(err?: Error): void
  flushHeaders?(): void
  once(event: 'drain', listener: () => void): unknown
  prependOnceListener(event: 'close', listener: () => void): unknown
}

export type Relay = (out: RelayOut) => void

const encoder = new TextEncoder()
/** The pass-through of one body: its web stream (made on first access) and, for a pushed body, its relay. */
export interface PipedBody {
  /**
   * Made when first read: a relayed body never needs it, and Node 20 takes 10–15 µs (and a dozen
   * objects that live as long as the response) to make one — a twentieth of the Node edge's CPU
   * for a request.
   */
  readonly readable: ReadableStream<Uint8Array>
  finished: Promise<BodyOutcome>
  relay?: Relay
}

/**
 * One ReadableStream pulling from the node's body: each client read is one upstream read, so
 * backpressure is the client's and nothing is buffered here. (A TransformStream plus pipeTo did
 * the same with three streams and a pipe loop per response: measurably more CPU per request.)
 */
export function passThrough(upstream: UpstreamBody, opts: PassThroughOptions): PipedBody {
  let atFrameBoundary = true
  let firstByteAtMs: number | undefined
  let settle!: (kind: BodyOutcome['kind']) => void
  const finished = new Promise<BodyOutcome>((resolve) => {
    let done = false
    settle = (kind) => {
      if (done) return
      done = true
      resolve({ kind, firstByteAtMs })
    }
  })
  const seen = (bytes: Uint8Array) => {
    if (bytes.byteLength === 0) return
    firstByteAtMs ??= opts.now()
    atFrameBoundary = endsWithBlankLine(bytes)
  }
  /**
   * The upstream broke after its headers: an event stream gets ONE dialect error event (a frame cut
   * in half is closed first) and ends; any other body fails, so the client sees it truncated.
   */
  const breakOff = (to: { send(bytes: Uint8Array): void; end(): void; fail(err: Error): void }) => {
    if (opts.sse) {
      const err = new ApiError('upstream_unavailable', 'The GPU node failed while streaming this response.')
      to.send(encoder.encode((atFrameBoundary ? '' : '\n\n') + renderStreamError(opts.codec.errors, err)))
      to.end()
    } else {
      to.fail(new Error('upstream body failed'))
    }
    settle('upstream_error')
  }

  // The reader is taken on the first pull, so a relayed body never locks the upstream's stream.
  let reader: ReadableStreamDefaultReader<Uint8Array> | undefined
  const webStream = () => new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        if (!reader) {
          if (!upstream.body) {
            controller.close()
            settle('complete')
            return
          }
          reader = upstream.body.getReader()
        }
        let chunk: Awaited<ReturnType<typeof reader.read>>
        try {
          chunk = await reader.read()
        } catch {
          upstreamFailed(controller)
          return
        }
        if (chunk.done) {
          controller.close()
          settle('complete')
          return
        }
        seen(chunk.value)
        controller.enqueue(chunk.value)
      },
      // The client left (Node and workerd both cancel the response body): cancel the upstream.
      cancel(reason) {
        settle('client_gone')
        const cancelled = reader ? reader.cancel(reason) : upstream.body?.cancel(reason)
        return cancelled?.catch(() => {})
      },
    },
    { highWaterMark: 0 },
  )

  function upstreamFailed(controller: ReadableStreamDefaultController<Uint8Array>): void {
    try {
      breakOff({ send: (bytes) => controller.enqueue(bytes), end: () => controller.close(), fail: (err) => controller.error(err) })
    } catch {
      // The client cancelled in the meantime.
      settle('client_gone')
    }
  }

  const pushTo = upstream.pushTo?.bind(upstream)
  if (!pushTo) return { readable: webStream(), finished }
  // A pushed body's web stream (Workers: the resumable body) takes its chunks straight from
  // pushTo. Pulling them out of the body's own web stream instead cost a second stream, read and
  // promise per chunk (instant upstream, c64, on Miniflare: 502-572 -> 507-629 requests/s).
  const pushedStream = () =>
    webStreamOfPushed(
      pushTo,
      (controller) => {
        const queue = queueInto(controller)
        return {
          chunk(bytes) {
            seen(bytes)
            return queue.chunk(bytes)
          },
          end() {
            queue.end()
            settle('complete')
          },
          error: () => upstreamFailed(controller),
        }
      },
      () => settle('client_gone'),
    )
  const relay: Relay = (out) => {
    let over = false
    let wrote = false
    // 'close' also follows a normal end; `over` tells the two apart. Ahead of the server's own
    // listener, which aborts the request and so fails the upstream: a client that left must
    // count as gone, not as a node that broke.
    out.prependOnceListener('close', () => {
      if (over) return
      over = true
      settle('client_gone')
      pushed.cancel(new Error('the client closed the response'))
    })
    const pushed: PushedBody = pushTo({
      chunk(bytes) {
        if (over) return true
        seen(bytes)
        wrote = true
        if (out.write(bytes)) return true
        out.once('drain', () => pushed.resume())
        return false
      },
      end() {
        if (over) return
        over = true
        out.end()
        settle('complete')
      },
      error() {
        if (over) return
        over = true
        breakOff({ send: (bytes) => void out.write(bytes), end: () => out.end(), fail: (err) => out.destroy(err) })
      },
    })
    // The node's opening frames usually come with its headers and go out with ours in one
    // write; a stream that has none yet still shows its headers at once.
    if (!wrote && !over) out.flushHeaders?.()
  }
  return new RelayedBody(pushedStream, finished, relay)
}

/**
 * A relayed body's PipedBody. A class, not an object literal with a `get readable()`: a literal's
 * getter is a new closure per call, and V8 (Node 20) then kept every request's whole graph (the
 * closure's context reaches the upstream, the Node response, Hono's Context…) through two young
 * collections, promoting ~13 kB a request to the old generation (body-promotion.test.ts guards it).
 * The getter on the prototype is one function for all.
 */
class RelayedBody implements PipedBody {
  private made: ReadableStream<Uint8Array> | undefined
  constructor(
    private readonly make: () => ReadableStream<Uint8Array>,
    readonly finished: Promise<BodyOutcome>,
    readonly relay: Relay,
  ) {}

  get readable(): ReadableStream<Uint8Array> {
    return (this.made ??= this.make())
  }
}

/**
 * A pushed body as one web stream: `sinkFor` makes, from the stream's controller, the sink pushTo
 * fills; up to 16 chunks are queued, then backpressure by pull (a pull resumes the source).
 * `onCancel` runs first when the reader cancels; the source is then cancelled.
 */
export function webStreamOfPushed(
  pushTo: (sink: ChunkSink) => PushedBody,
  sinkFor: (controller: ReadableStreamDefaultController<Uint8Array>) => ChunkSink = queueInto,
  onCancel?: () => void,
): ReadableStream<Uint8Array> {
  let pushed: PushedBody
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        pushed = pushTo(sinkFor(controller))
      },
      pull: () => pushed.resume(),
      cancel(reason) {
        onCancel?.()
        pushed.cancel(reason instanceof Error ? reason : new Error(String(reason)))
      },
    },
    { highWaterMark: 16 },
  )
}

/** The plain sink into a web stream: each chunk queued; full once the queue reaches its mark. */
function queueInto(controller: ReadableStreamDefaultController<Uint8Array>): ChunkSink {
  return {
    chunk(bytes) {
      controller.enqueue(bytes)
      return (controller.desiredSize ?? 0) > 0
    },
    end: () => controller.close(),
    error: (err) => controller.error(err),
  }
}

function endsWithBlankLine(chunk: Uint8Array): boolean {
  const n = chunk.byteLength
  return n >= 2 && chunk[n - 1] === 0x0a && (chunk[n - 2] === 0x0a || (n >= 4 && chunk[n - 2] === 0x0d && chunk[n - 3] === 0x0a))
}
