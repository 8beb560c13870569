/**
 * The writing side of one SSE response: headers, frames, `: keep-alive` comments while the
 * first token is pending, and a bound on what a slow reader can make us buffer.
 */
import { SSE_HEADERS, SSE_KEEP_ALIVE } from '../../../shared/src/sse.ts'
import { end, write, writeHead, type OutgoingHttpHeaders, type ServerRequest, type ServerResponse } from './http-types.ts'

/**
 * Frames written while the socket reports backpressure are buffered by Node. Token frames are
 * small, so a briefly slow reader is fine; a reader that stops reading for this many bytes is
 * treated as gone (the request is aborted rather than buffered without limit).
 */
const MAX_CONGESTED_BYTES = 8 * 1024 * 1024

export class SseStream {
  private keepAlive: NodeJS.Timeout | undefined
  private congestedBytes = 0
  private ended = false

  constructor(
    private readonly req: ServerRequest,
    private readonly res: ServerResponse,
    /** Called once if the reader falls too far behind; the caller aborts the request. */
    private readonly onStalled: () => void,
  ) {
    res.on('drain', () => {
      this.congestedBytes = 0
    })
  }

  /** Sends 200 with the stream headers and the dialect's opening frames. */
  open(headers: OutgoingHttpHeaders, firstFrames: string): void {
    writeHead(this.req, this.res, 200, { ...SSE_HEADERS, ...headers })
    this.write(firstFrames)
    // Flush headers now even when the dialect has no opening frame (completions): the client
    // (and the edge's TTFB) should see the stream start at once.
    if (firstFrames === '') (this.res as { flushHeaders?: () => void }).flushHeaders?.()
  }

  /** Sends `: keep-alive` every `intervalMs` until stopKeepAlive() or end(). */
  startKeepAlive(intervalMs: number): void {
    this.keepAlive = setInterval(() => this.write(SSE_KEEP_ALIVE), intervalMs)
  }

  stopKeepAlive(): void {
    clearInterval(this.keepAlive)
    this.keepAlive = undefined
  }

  write(frame: string): void {
    if (frame === '' || this.ended || this.res.destroyed) return
    if (write(this.res, frame)) return
    this.congestedBytes += Buffer.byteLength(frame)
    if (this.congestedBytes > MAX_CONGESTED_BYTES) this.onStalled()
  }

  end(lastFrames = ''): void {
    if (this.ended) return
    this.stopKeepAlive()
    this.write(lastFrames)
    this.ended = true
    if (!this.res.destroyed) end(this.res)
  }

  get isEnded(): boolean {
    return this.ended
  }
}
