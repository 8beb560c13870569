import type { SessionIo } from '../../gpu-node/src/model/session-io.ts'

/**
 * Probes that feed each step's present.* back as the next past work on the Optimum (concat) KV
 * interface only; the presets default to the slot interface (cache-attention-graph.ts).
 */
export function assertConcatKv(io: SessionIo, path: string): void {
  if (io.kvCache === 'concat') return
  throw new Error(`${path}: a slot-KV model; this probe feeds present.* back, so give it the concat variant: npx tsx gpu-node/tools/generate-model/cli.ts --preset <name> --kv-cache concat --out DIR`)
}
