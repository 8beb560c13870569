/**
 * `node --import tsx infra/local/miniflare-edge-cli.ts --ip H --port P --env-file F [--config C]
 * [--persist-to D] [--no-watch] [--inspector-port N] [--v8-flags='--a --b']`: the local Workers edge on Miniflare directly (miniflare-edge.ts)
 * as a process of its own, for the stack's supervisor and the bench. Prints one JSON line
 * `{"msg":"miniflare edge ready","url"}` once it serves; SIGTERM/SIGINT stop workerd too.
 */
import { parseArgs } from 'node:util'
import { disposeOnSignal, LOCAL_EDGE_FLAGS, localEdgeInput, optionsOrExit } from './local-edge.ts'
import { MiniflareEdgeOptions, startMiniflareEdge } from './miniflare-edge.ts'

const { values } = parseArgs({ args: process.argv.slice(2), options: { ...LOCAL_EDGE_FLAGS, 'inspector-port': { type: 'string' }, 'v8-flags': { type: 'string' } } })
// `--v8-flags=` (empty): none, workerd as Miniflare starts it; absent: the default's. The `=` form,
// as the value starts with dashes.
const v8Flags = values['v8-flags']?.split(/\s+/).filter(Boolean)
const options = optionsOrExit(MiniflareEdgeOptions.safeParse({ ...localEdgeInput(values), inspectorPort: values['inspector-port'], ...(v8Flags ? { v8Flags } : {}) }))

const edge = await startMiniflareEdge(options)
console.log(JSON.stringify({ msg: 'miniflare edge ready', url: edge.url }))
disposeOnSignal(() => edge.dispose())
