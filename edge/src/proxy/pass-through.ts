/**
 * The node's body as the client's body: chunks pass through a TransformStream untouched. Two
 * endings need the edge:
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

export function passThrough(body: ReadableStream<Uint8Array>, opts: PassThroughOptions): { readable: ReadableStream<Uint8Array>; finished: Promise<BodyOutcome> } {
  let atFrameBoundary = true
  let firstByteAtMs: number | undefined
  /** The upstream body ended normally: only then does the transform flush. */
  let flushed = false
  const pipe = new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      if (chunk.byteLength > 0) {
        firstByteAtMs ??= opts.now()
        atFrameBoundary = endsWithBlankLine(chunk)
      }
      controller.enqueue(chunk)
    },
    flush() {
      flushed = true
    },
  })
  // preventAbort: when the upstream errors, the client side stays writable for the error event.
  // A client that cancels makes the pipe reject in Node, but workerd RESOLVES it (the source is
  // cancelled, nothing flushed): a resolved pipe without a flush is a client that left.
  const finished = body.pipeTo(pipe.writable, { preventAbort: true }).then(
    (): BodyOutcome => ({ kind: flushed ? 'complete' : 'client_gone', ...(firstByteAtMs !== undefined ? { firstByteAtMs } : {}) }),
    async (): Promise<BodyOutcome> => {
      const kind = await endAfterUpstreamFailure(pipe.writable, opts, atFrameBoundary)
      return { kind, ...(firstByteAtMs !== undefined ? { firstByteAtMs } : {}) }
    },
  )
  return { readable: pipe.readable, finished }
}

/** The pipe failed: either the client left (nothing to write to) or the upstream broke. */
async function endAfterUpstreamFailure(writable: WritableStream<Uint8Array>, opts: PassThroughOptions, atFrameBoundary: boolean): Promise<BodyOutcome['kind']> {
  let writer: WritableStreamDefaultWriter<Uint8Array>
  try {
    writer = writable.getWriter()
  } catch {
    return 'client_gone'
  }
  if (writer.desiredSize === null) return 'client_gone' // errored: the client cancelled
  try {
    if (opts.sse) {
      const err = new ApiError('upstream_unavailable', 'The GPU node failed while streaming this response.')
      // A frame cut in half is closed first, so the error event parses as its own frame.
      await writer.write(encoder.encode((atFrameBoundary ? '' : '\n\n') + renderStreamError(opts.dialect, err)))
      await writer.close()
    } else {
      await writer.abort(new Error('upstream body failed'))
    }
    return 'upstream_error'
  } catch {
    return 'client_gone'
  }
}

function endsWithBlankLine(chunk: Uint8Array): boolean {
  const n = chunk.byteLength
  return n >= 2 && chunk[n - 1] === 0x0a && (chunk[n - 2] === 0x0a || (n >= 4 && chunk[n - 2] === 0x0d && chunk[n - 3] === 0x0a))
}
