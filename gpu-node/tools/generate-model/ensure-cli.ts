/**
 * `npm run gpu-node`'s first step (infra/scripts/launch-gpu-node.mjs): generates the model the
 * node is about to serve when MODEL_DIR names a preset under models/ that is missing or stale
 * (ensure-model.ts); any other directory is left for the node to load or to refuse by name.
 * The node itself never generates: a build tool is not part of its runtime.
 */
import { DEFAULT_MODEL_DIR } from '../../src/config.ts'
import { ensureGeneratedModel } from './ensure-model.ts'

await ensureGeneratedModel(process.env.MODEL_DIR || DEFAULT_MODEL_DIR, (line) => console.log(line))
