/**
 * Reads a resumable stream (shared/src/resume-wire.ts) as the edge sees it: raw frames with their
 * `id:` lines, the text each frame carries (per dialect), and the delivered tokens a cut after
 * frame k would hand a continuation.
 */
import { parseResumeId } from '../../shared/src/resume-wire.ts'
import { post } from './sse-client.ts'

export interface RawFrame {
  id?: { generated: number; tokens: number[]; flushed: boolean }
  event?: string
  data: string
  /** The content text this frame adds ('' for preamble, finish and usage frames). */
  text: string
}

export type Path = '/v1/chat/completions' | '/v1/completions' | '/v1/messages'

export async function streamFrames(url: string, path: Path, body: unknown, headers: Record<string, string>): Promise<{ status: number; frames: RawFrame[] }> {
  const res = await post(url, path, body, { headers })
  const raw = await res.text()
  const frames: RawFrame[] = []
  for (const block of raw.split('\n\n')) {
    if (block.trim() === '' || block.startsWith(':')) continue
    const frame: RawFrame = { data: '', text: '' }
    for (const line of block.split('\n')) {
      if (line.startsWith('id: ')) frame.id = parseResumeId(line.slice(4))
      else if (line.startsWith('event: ')) frame.event = line.slice(7)
      else if (line.startsWith('data: ')) frame.data = line.slice(6)
    }
    frame.text = textOf(path, frame)
    frames.push(frame)
  }
  return { status: res.status, frames }
}

function textOf(path: Path, f: RawFrame): string {
  if (f.data === '' || f.data === '[DONE]') return ''
  const j = JSON.parse(f.data)
  if (path === '/v1/messages') return f.event === 'content_block_delta' ? j.delta.text : ''
  if (path === '/v1/completions') return j.choices?.[0]?.text ?? ''
  return j.choices?.[0]?.delta?.content ?? ''
}

/**
 * Where a stream may be cut: between the node's writes. A content write starts with its id line
 * and may hold several frames (Anthropic's first text opens its block: content_block_start,
 * ping, delta); the node writes each at once, so a death delivers all of a write or none of it.
 * The cuts: before each content write, and after the last one (before the closing frames).
 */
export function writeEnds(frames: readonly RawFrame[]): number[] {
  const starts = frames.flatMap((f, i) => (f.id ? [i] : []))
  let end = starts[starts.length - 1]! + 1
  while (end < frames.length && ['content_block_start', 'ping', 'content_block_delta'].includes(frames[end]!.event ?? '')) end++
  return [...starts, end]
}

/** The tokens delivered once frames [0, k) arrived: the id lines' tokens, concatenated. */
export function deliveredAfter(frames: readonly RawFrame[], k: number): number[] {
  return frames.slice(0, k).flatMap((f) => f.id?.tokens ?? [])
}

/** Whether the finish flush was among frames [0, k) (x-zl-resume's `.f`). */
export function flushedAfter(frames: readonly RawFrame[], k: number): boolean {
  return frames.slice(0, k).some((f) => f.id?.flushed === true)
}

export const joinText = (frames: readonly RawFrame[]) => frames.map((f) => f.text).join('')

/** The final usage's completion-token count, in either dialect's shape. */
export function completionTokens(frames: readonly RawFrame[]): number | undefined {
  for (const f of frames.slice().reverse()) {
    if (f.data === '' || f.data === '[DONE]') continue
    const j = JSON.parse(f.data)
    if (j.usage?.completion_tokens !== undefined) return j.usage.completion_tokens
    if (j.type === 'message_delta') return j.usage.output_tokens
  }
  return undefined
}
