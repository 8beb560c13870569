/**
 * Server-sent event framing. JSON.stringify escapes CR and LF, so one JSON value always fits
 * on one `data:` line; a frame ends with a blank line.
 */

/** Headers every dialect stream carries (DESIGN.md §6): no proxy buffering, no caching. */
export const SSE_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  'x-accel-buffering': 'no',
})

/** A comment frame: keeps idle connections and proxies open, ignored by every SSE parser. */
export const SSE_KEEP_ALIVE = ': keep-alive\n\n'

/** OpenAI's end-of-stream sentinel. */
export const SSE_DONE = 'data: [DONE]\n\n'

/** A `data:` frame (OpenAI style: no event name). */
export function sseData(payload: unknown): string {
  return `data: ${JSON.stringify(payload)}\n\n`
}

/** An `event:` frame (Anthropic style: the SDK dispatches on the event name only). */
export function sseEvent(event: string, payload: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(payload)}\n\n`
}
