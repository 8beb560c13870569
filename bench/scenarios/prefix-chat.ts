/**
 * The prefix section's multi-turn client: conversations of T turns of OpenAI chat (streamed,
 * greedy, ignore_eos, 32 new tokens), every turn resending the whole conversation with the
 * previous answer, as a chat client does — or (`api: 'responses'`) of the Responses API, every
 * turn sending only its new message and naming the previous answer (`previous_response_id`,
 * the server keeps the conversation); `concurrency` conversations at a time (default all), each
 * request sent where `router` says (bench/lib/baseline-routers.ts).
 */
import type { Dispatcher } from 'undici'
import type { Router } from '../lib/baseline-routers.ts'
import { sendRequest, type RequestRecord } from '../load/client.ts'
import { buildBody, DIALECT_PATH } from '../load/dialects.ts'

export interface Conversations {
  router: Router
  model: string
  system: string
  /** conversations × turns user messages, conversation-major. */
  users: string[]
  conversations: number
  turns: number
  /** Conversations in flight at once (default: every one). */
  concurrency?: number
  dispatcher: Dispatcher
  /** A user's pause before each turn after the first, in ms (default none). */
  thinkMs?: (conversation: number, turn: number) => number
  /** `responses`: stored conversations (default `chat`). */
  api?: 'chat' | 'responses'
}

/** Each conversation's turns, in order. */
export async function runConversations(o: Conversations): Promise<RequestRecord[][]> {
  const out: RequestRecord[][] = []
  let next = 0
  const worker = async () => {
    for (let c = next++; c < o.conversations; c = next++) out[c] = await converse(o, c)
  }
  await Promise.all(Array.from({ length: Math.min(o.concurrency ?? o.conversations, o.conversations) }, worker))
  return out
}

async function converse(o: Conversations, c: number): Promise<RequestRecord[]> {
  const messages: Array<{ role: 'system' | 'user' | 'assistant'; content: string }> = [{ role: 'system', content: o.system }]
  const out: RequestRecord[] = []
  for (let t = 0; t < o.turns; t++) {
    const pause = t > 0 ? (o.thinkMs?.(c, t) ?? 0) : 0
    if (pause > 0) await new Promise((resolve) => setTimeout(resolve, pause))
    const user = o.users[c * o.turns + t]!
    messages.push({ role: 'user', content: user })
    const dialect = o.api === 'responses' ? 'openai-responses' : 'openai-chat'
    const previousResponseId = out[out.length - 1]?.responseId
    const body = dialect === 'openai-chat'
      ? buildBody(dialect, { model: o.model, text: '', messages, maxTokens: 32, stream: true, ignoreEos: true })
      : buildBody(dialect, { model: o.model, text: user, instructions: o.system, maxTokens: 32, stream: true, ignoreEos: true, ...(previousResponseId ? { previousResponseId } : {}) })
    const route = o.router.route(DIALECT_PATH[dialect], body)
    const rec = await sendRequest({ origin: route.origin, dialect, body, stream: true, dispatcher: o.dispatcher, captureText: true, timeoutMs: 300_000, headers: route.headers }).finally(() => route.done())
    if (rec.error || rec.status !== 200) throw new Error(`multi-turn request failed: ${rec.error ?? rec.status}`)
    out.push(rec)
    messages.push({ role: 'assistant', content: rec.text ?? '' })
  }
  return out
}

/** The turns after the first, every conversation's. */
export function laterTurns(runs: RequestRecord[][]): RequestRecord[] {
  return runs.flatMap((turns) => turns.slice(1))
}

/** Cached ÷ prompt tokens over the turns after the first. */
export function laterTurnsCachedShare(runs: RequestRecord[][]): number {
  const later = laterTurns(runs)
  const prompt = later.reduce((n, r) => n + (r.promptTokens ?? 0), 0)
  return prompt === 0 ? 0 : later.reduce((n, r) => n + (r.cachedTokens ?? 0), 0) / prompt
}
