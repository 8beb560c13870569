import type * as ort from 'onnxruntime-node'
import { GREEDY, type EngineLimits, type EngineObserver, type EngineRequest } from '../../src/engine/types.ts'
import { Grammars } from '../../src/structured/grammars.ts'
import { encodedVocab, tokenPieces } from '../../src/structured/tokenizer-info.ts'
import { Engine } from '../../src/engine/engine.ts'
import type { BatchCache } from '../../src/model/batch-kv-cache.ts'
import type { KvPath } from '../../src/model/kv-path.ts'
import type { LogitsPath } from '../../src/model/last-logits-edit.ts'
import type { ModelDir } from '../../src/model/model-dir.ts'
import { ModelStep } from '../../src/model/model-step.ts'
import { openModelSession, type OpenSessionOptions } from '../../src/model/open-session.ts'
import { toModelInfo, type StepPlan } from '../../src/model/runner.ts'
import { readSessionIo, type SessionIo } from '../../src/model/session-io.ts'
import { ModelTokenizer } from '../../src/model/tokenizer.ts'
import { generateText } from './generate-text.ts'
import { InProcessRunner } from './in-process-runner.ts'
import { ONE_THREAD } from './one-thread.ts'

/**
 * An engine on a model opened with chosen load-time edits (open-session.ts), in process, for the
 * tests that prove an edit exact: the same requests alone and batched, with the edit and without.
 */
export interface EditedEngine {
  engine: Engine
  kvPath: KvPath
  logitsPath: LogitsPath
  io: SessionIo
}

export interface EditedEngineOptions extends Omit<OpenSessionOptions, 'config'> {
  /** The batch cache to drive the session with (a control's deliberately wrong one). */
  cache?: (io: SessionIo) => BatchCache
  /** Wraps the session (a control that reads the wrong logits). */
  session?: (s: ort.InferenceSession) => ort.InferenceSession
  /** Engine limits over the defaults below (speculation, a small KV budget, the prefix cache). */
  limits?: Partial<EngineLimits>
  /** Grammars and token pieces from the model's tokenizer: constrained and log-probability requests. */
  structured?: boolean
  observer?: EngineObserver
  /** Rewrites each plan before the model runs it (a control's wrong takeover or donor). */
  rewrite?: (plan: StepPlan) => StepPlan
}

export async function openEditedEngine(dir: ModelDir, opts: EditedEngineOptions = {}): Promise<EditedEngine> {
  const { cache, session: wrap, limits: over, structured, observer, rewrite, ...edits } = opts
  const limits: EngineLimits = { maxBatch: 16, maxQueue: 64, kvBudgetBytes: 1 << 30, prefillChunkTokens: 16, ...over }
  const opened = await openModelSession(dir.onnxPath, ONE_THREAD, { config: dir.config, ...edits })
  const io = readSessionIo(opened.session, dir.config)
  const info = toModelInfo(dir, { ...io, couplingOps: [], kvPath: opened.kvPath, logitsPath: opened.logitsPath })
  const session = wrap ? wrap(opened.session) : opened.session
  const vocab = structured ? encodedVocab(dir.tokenizerJson, dir.config.vocabSize) : undefined
  const step = new ModelStep(session, io, info.eosTokenIds, {
    batch: cache?.(io),
    kvBudgetBytes: limits.kvBudgetBytes,
    ...(limits.prefixBlockTokens ? { prefixBlockTokens: limits.prefixBlockTokens } : {}),
    ...(vocab ? { grammars: new Grammars(vocab, dir.eosTokenIds), tokenPiece: tokenPieces(vocab), vocabSize: vocab.tokens.length } : {}),
  })
  const engine = new Engine({ runner: new InProcessRunner(info, step, rewrite), decoder: new ModelTokenizer(dir), limits, modelKey: dir.modelId, ...(observer ? { observer } : {}) })
  return { engine, kvPath: opened.kvPath, logitsPath: opened.logitsPath, io }
}

/** Prompts of 1 to ~20 tokens (longer ones prefilled in chunks of 16) and different output lengths. */
export function exactnessRequests(dir: ModelDir): EngineRequest[] {
  const tok = new ModelTokenizer(dir)
  const prompts = ['Hi', 'The quick brown fox jumps', 'Once upon a time, in a land far away, there lived', 'a', 'Streaming tokens from', 'zerolayer is a global LLM API that routes to the nearest node', '1 2 3 4', 'ok']
  return prompts.map((p, i) => ({ id: `r${i}`, promptTokens: tok.encodeText(p), maxTokens: 6 + ((i * 7) % 23), stop: [], sampling: GREEDY, priority: 0, ignoreEos: true }))
}

/** Each request's text, one request at a time. */
export async function textsAlone(o: EditedEngine, reqs: EngineRequest[]): Promise<string[]> {
  const out: string[] = []
  for (const r of reqs) out.push(await generateText(o.engine, { ...r, id: `alone-${r.id}` }))
  return out
}

/** Each request's text, all submitted at once (one batch). */
export const textsTogether = (o: EditedEngine, reqs: EngineRequest[]): Promise<string[]> => Promise.all(reqs.map((r) => generateText(o.engine, r)))
