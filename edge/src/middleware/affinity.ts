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
    // A supersede key names a session whose requests should meet on one node (where the newer
    // one ends the older at once), as a context id does.
    const { gen, supersede } = c.get('generate')
    if (config.enabled) c.set('affinity', affinityKeyOf(gen, c.get('principal').tenant, c.req.header(CONTEXT_ID_HEADER) ?? supersede))
  }
}
