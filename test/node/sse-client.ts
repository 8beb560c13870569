/**
 * A small raw-fetch client for the node's dialect routes: POST a JSON body, read an SSE body
 * frame by frame (so a test can abort after N frames), parse error bodies.
 */

export interface SseFrame {
  /** The `event:` name, when the frame has one (Anthropic). */
  event?: string
  /** The joined `data:` lines ('' for a comment-only frame). */
  data: string
  /** True for a `: comment` frame (keep-alive). */
  comment: boolean
}

export function post(url: string, path: string, body: unknown, init: { signal?: AbortSignal; headers?: Record<string, string> } = {}): Promise<Response> {
  return fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...init.headers },
    body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
    ...(init.signal ? { signal: init.signal } : {}),
  })
}

/** Frames of an SSE body as they arrive. Stops at the end of the body. */
export async function* sseFrames(res: Response): AsyncGenerator<SseFrame> {
  if (!res.body) return
  const decoder = new TextDecoder()
  let buf = ''
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buf += decoder.decode(chunk, { stream: true })
    let end: number
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const raw = buf.slice(0, end)
      buf = buf.slice(end + 2)
      yield parseFrame(raw)
    }
  }
  if (buf.trim() !== '') yield parseFrame(buf)
}

function parseFrame(raw: string): SseFrame {
  const data: string[] = []
  let event: string | undefined
  let comment = false
  for (const line of raw.split('\n')) {
    if (line.startsWith(':')) comment = true
    else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''))
    else if (line.startsWith('event:')) event = line.slice(6).trim()
  }
  return { ...(event !== undefined ? { event } : {}), data: data.join('\n'), comment: comment && data.length === 0 }
}

/** Every frame of a finished SSE body, keep-alive comments dropped. */
export async function readAllFrames(res: Response): Promise<SseFrame[]> {
  const out: SseFrame[] = []
  for await (const f of sseFrames(res)) if (!f.comment) out.push(f)
  return out
}

export const CHAT = '/v1/chat/completions'
export const COMPLETIONS = '/v1/completions'
export const MESSAGES = '/v1/messages'
