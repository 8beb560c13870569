/**
 * The trial compiler's thread (compile-trial.ts): its own xgrammar and tokenizer info, built at
 * start, compiling each constraint it is sent and saying how long that took.
 */
import { parentPort, workerData } from 'node:worker_threads'
import { performance } from 'node:perf_hooks'
import type { OutputConstraint } from '../../../shared/src/generation.ts'
import { Grammars } from './grammars.ts'
import type { EncodedVocab } from './tokenizer-info.ts'

export interface CompileTrialInit {
  vocab: EncodedVocab
  eosTokenIds: number[]
}

const init = workerData as CompileTrialInit
const grammars = new Grammars(init.vocab, init.eosTokenIds)
const port = parentPort!
// The tokenizer info and compiler first, so no trial's time includes them.
void grammars.compile({ kind: 'json_object' }).then(
  () => port.postMessage({ type: 'ready' }),
  (e: Error) => port.postMessage({ type: 'fatal', message: e.message }),
)
port.on('message', async (msg: { id: number; spec: OutputConstraint }) => {
  const t0 = performance.now()
  try {
    const compiled = await grammars.compile(msg.spec)
    port.postMessage({ type: 'result', id: msg.id, ms: performance.now() - t0 })
    // Only the time was wanted: the model worker compiles the grammar it will use.
    grammars.forget(msg.spec)
    compiled.dispose()
  } catch (e) {
    port.postMessage({ type: 'error', id: msg.id, message: (e as Error).message })
  }
})
