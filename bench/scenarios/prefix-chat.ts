/**
 * The prefix section's multi-turn client: C conversations at once, each T turns of OpenAI chat
 * (streamed, greedy, ignore_eos, 32 new tokens), every turn resending the whole conversation
 * with the previous answer, as a chat client does.
 */
import type { Dispatcher } from 'undici'
import { sendRequest, type RequestRecord } from '../load/client.ts'
import { buildBody } from '../load/dialects.ts'

export interface Conversations {
  origin: string
  model: string
  system: string
  /** conversations × turns user messages, conversation-major. */
  users: string[]
  conversations: number
  turns: number
  dispatcher: Dispatcher
  headers?: Record<string, string>
}

/** Each conversation's turns, in order. */
export async function runConversations(o: Conversations): Promise<RequestRecord[][]> {
  return Promise.all(Array.from({ length: o.conversations }, async (_, c) => {
    const messages: Array<{ role: 'system' | 'user' | 'assistant'; content: string }> = [{ role: 'system', content: o.system }]
    const out: RequestRecord[] = []
    for (let t = 0; t < o.turns; t++) {
      messages.push({ role: 'user', content: o.users[c * o.turns + t]! })
      const body = buildBody('openai-chat', { model: o.model, text: '', messages, maxTokens: 32, stream: true, ignoreEos: true })
      const rec = await sendRequest({ origin: o.origin, dialect: 'openai-chat', body, stream: true, dispatcher: o.dispatcher, captureText: true, timeoutMs: 300_000, ...(o.headers ? { headers: o.headers } : {}) })
      if (rec.error || rec.status !== 200) throw new Error(`multi-turn request failed: ${rec.error ?? rec.status}`)
      out.push(rec)
      messages.push({ role: 'assistant', content: rec.text ?? '' })
    }
    return out
  }))
}

/** Cached ÷ prompt tokens over the turns after the first. */
export function laterTurnsCachedShare(runs: RequestRecord[][]): number {
  const later = runs.flatMap((turns) => turns.slice(1))
  const prompt = later.reduce((n, r) => n + (r.promptTokens ?? 0), 0)
  return prompt === 0 ? 0 : later.reduce((n, r) => n + (r.cachedTokens ?? 0), 0) / prompt
}
