/**
 * Step 4c (after validation, before tokens/min): the request's affinity key
 * (routing/affinity-key.ts), which the tokens/min call then carries a read for and the generate
 * route places by. Unset with AFFINITY=off: the request routes as it did before affinity existed.
 */
import type { AffinityConfig } from '../config.ts'
import { affinityKeyOf, CONTEXT_ID_HEADER } from '../routing/affinity-key.ts'
import type { Step } from './pipeline.ts'

export function deriveAffinity(config: AffinityConfig): Step {
  return (c) => {
    if (config.enabled) c.set('affinity', affinityKeyOf(c.get('generate').gen, c.get('principal').tenant, c.req.header(CONTEXT_ID_HEADER)))
  }
}
