/**
 * Test doubles on the far side of the server's boundaries: an engine that plays a script of
 * text events (scheduled with setImmediate, no timers) and records submits and aborts, and a
 * prompt encoder whose tokens are UTF-8 bytes.
 */
import type { ChatMessage, OutputConstraint } from '../../../shared/src/generation.ts'
import type { EngineEvent, EngineHandle, EngineRequest, EngineStats, FinishReason, SubmitResult } from '../../src/engine/types.ts'
import type { PromptEncoder } from '../../src/model/prompt-encoder.ts'

export const TEST_MODEL_ID = 'zl-test-model'

export function byteEncoder(contextLength = 256, modelId = TEST_MODEL_ID): PromptEncoder {
  const utf8 = new TextEncoder()
  return {
    modelId,
    contextLength,
    encodeChat: (messages: ChatMessage[]) => [...utf8.encode(messages.map((m) => `${m.role}: ${m.content}\n`).join(''))],
    encodeText: (prompt: string) => [...utf8.encode(prompt)],
    // Byte 0x01 / 0x02 / 0x03 stand for the FIM tokens (prefix, suffix, middle).
    encodeInfill: (prefix: string, suffix: string) => [1, ...utf8.encode(prefix), 2, ...utf8.encode(suffix), 3],
    defaults: { sampling: {} },
    toolCallFormat: 'hermes',
  }
}

export interface Script {
  texts: string[]
  reason: FinishReason
  stopSequence?: string
  errorCode?: string
  /** When set, nothing is emitted until it resolves (slow first token, client-abort tests). */
  gate?: Promise<void>
}

/** A waiter for a condition signalled from inside the double. */
function signal<T>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void
  const promise = new Promise<T>((r) => (resolve = r))
  return { promise, resolve }
}

export class ScriptedEngine implements EngineHandle {
  script: (req: EngineRequest) => Script = () => ({ texts: ['Hel', 'lo', '!'], reason: 'stop' })
  /** When set, submit() refuses with it. */
  refuse?: Exclude<SubmitResult, { ok: true }>
  readonly submitted: EngineRequest[] = []
  readonly aborts: string[] = []
  draining = false
  private readonly live = new Map<string, (e: EngineEvent) => void>()
  private drained = signal<void>()
  private readonly waiters: Array<{ test: () => boolean; resolve: () => void }> = []

  /** Constraints the route asked to prepare; `refusePrepare` makes it reject. */
  readonly prepared: OutputConstraint[] = []
  refusePrepare?: Error

  async prepare(constraint: OutputConstraint): Promise<void> {
    this.prepared.push(constraint)
    if (this.refusePrepare) throw this.refusePrepare
  }

  submit(req: EngineRequest, onEvent: (event: EngineEvent) => void): SubmitResult {
    if (this.draining) return { ok: false, code: 'draining', retryAfterMs: 1000 }
    if (this.refuse) return this.refuse
    this.submitted.push(req)
    this.live.set(req.id, onEvent)
    void this.play(req, this.script(req))
    this.wake()
    return { ok: true }
  }

  abort(id: string): void {
    this.aborts.push(id)
    this.finish(id, { type: 'finish', reason: 'abort', usage: { promptTokens: 0, completionTokens: 0 } })
    this.wake()
  }

  /** Resolves once `id` has been aborted (at once if it already was). */
  abortedOnce(id: string): Promise<void> {
    return this.until(() => this.aborts.includes(id))
  }

  /** Resolves once a request with this engine id was admitted. */
  submittedOnce(id: string): Promise<void> {
    return this.until(() => this.submitted.some((r) => r.id === id))
  }

  private until(test: () => boolean): Promise<void> {
    if (test()) return Promise.resolve()
    return new Promise((resolve) => this.waiters.push({ test, resolve }))
  }

  private wake(): void {
    for (const w of [...this.waiters]) {
      if (!w.test()) continue
      this.waiters.splice(this.waiters.indexOf(w), 1)
      w.resolve()
    }
  }

  stats(): EngineStats {
    return { running: this.live.size, waiting: 0, maxBatch: 32, kvUsedFrac: 0.25, tokPerSec: 123, prefillTokPerSec: 0, draining: this.draining }
  }

  drain(): Promise<void> {
    this.draining = true
    if (this.live.size === 0) return Promise.resolve()
    return this.drained.promise
  }

  async close(): Promise<void> {}

  get liveCount(): number {
    return this.live.size
  }

  private async play(req: EngineRequest, script: Script): Promise<void> {
    await script.gate
    let tokens = 0
    for (const text of script.texts) {
      await new Promise((r) => setImmediate(r))
      const onEvent = this.live.get(req.id)
      if (!onEvent) return
      tokens += 1
      onEvent({ type: 'text', text, completionTokens: tokens, tokens: [tokens] }) // a scripted engine has no real ids: the count stands in
    }
    await new Promise((r) => setImmediate(r))
    const finish: EngineEvent = { type: 'finish', reason: script.reason, usage: { promptTokens: req.promptTokens.length, completionTokens: tokens } }
    if (script.stopSequence) finish.stopSequence = script.stopSequence
    if (script.errorCode) finish.error = { code: script.errorCode }
    this.finish(req.id, finish)
  }

  private finish(id: string, event: EngineEvent): void {
    const onEvent = this.live.get(id)
    if (!onEvent) return
    this.live.delete(id)
    onEvent(event)
    if (this.live.size === 0 && this.draining) this.drained.resolve()
  }
}
