/**
 * The node's body as the client's body: chunks pass through untouched. Two endings need the edge:
 * - the upstream breaks after bytes were sent: an SSE stream ends with ONE dialect error event
 *   (renderStreamError) so SDKs raise an error instead of hanging or seeing a silent end; a JSON
 *   body is errored (the client sees a truncated response, never a wrong one);
 * - the client leaves: the cancel runs back through the pipe and cancels the upstream body,
 *   which closes the node's stream (the node then aborts the sequence and frees its KV).
 */
import { ApiError } from '../../../shared/src/api-error.ts'
import { renderStreamError } from '../../../shared/src/error-body.ts'
import type { Dialect } from '../../../shared/src/generation.ts'

export interface BodyOutcome {
  kind: 'complete' | 'upstream_error' | 'client_gone'
  /** Epoch ms of the first byte handed to the client. */
  firstByteAtMs?: number
}

export interface PassThroughOptions {
  dialect: Dialect
  /** The body is text/event-stream (an error event may be appended). */
  sse: boolean
  now: () => number
}

const encoder = new TextEncoder()

/**
 * One ReadableStream pulling from the node's body: each client read is one upstream read, so
 * backpressure is the client's and nothing is buffered here. (A TransformStream plus pipeTo did
 * the same with three streams and a pipe loop per response: measurably more CPU per request.)
 */
export function passThrough(body: ReadableStream<Uint8Array>, opts: PassThroughOptions): { readable: ReadableStream<Uint8Array>; finished: Promise<BodyOutcome> } {
  const reader = body.getReader()
  let atFrameBoundary = true
  let firstByteAtMs: number | undefined
  let settle!: (kind: BodyOutcome['kind']) => void
  const finished = new Promise<BodyOutcome>((resolve) => {
    let done = false
    settle = (kind) => {
      if (done) return
      done = true
      resolve({ kind, ...(firstByteAtMs !== undefined ? { firstByteAtMs } : {}) })
    }
  })
  const readable = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
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
        const bytes = chunk.value
        if (bytes.byteLength > 0) {
          firstByteAtMs ??= opts.now()
          atFrameBoundary = endsWithBlankLine(bytes)
        }
        controller.enqueue(bytes)
      },
      // The client left (Node and workerd both cancel the response body): cancel the upstream.
      cancel(reason) {
        settle('client_gone')
        return reader.cancel(reason).catch(() => {})
      },
    },
    { highWaterMark: 0 },
  )

  /** The upstream broke after its headers: SSE gets one dialect error event, JSON is errored. */
  function upstreamFailed(controller: ReadableStreamDefaultController<Uint8Array>): void {
    try {
      if (opts.sse) {
        const err = new ApiError('upstream_unavailable', 'The GPU node failed while streaming this response.')
        // A frame cut in half is closed first, so the error event parses as its own frame.
        controller.enqueue(encoder.encode((atFrameBoundary ? '' : '\n\n') + renderStreamError(opts.dialect, err)))
        controller.close()
      } else {
        controller.error(new Error('upstream body failed'))
      }
      settle('upstream_error')
    } catch {
      // The client cancelled in the meantime.
      settle('client_gone')
    }
  }

  return { readable, finished }
}

function endsWithBlankLine(chunk: Uint8Array): boolean {
  const n = chunk.byteLength
  return n >= 2 && chunk[n - 1] === 0x0a && (chunk[n - 2] === 0x0a || (n >= 4 && chunk[n - 2] === 0x0d && chunk[n - 3] === 0x0a))
}
