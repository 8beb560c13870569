/**
 * `node --import tsx infra/local/wrangler-dev-cli.ts --ip H --port P --env-file F [--config C]
 * [--persist-to D] [--log-level L] [--no-watch] [--inspector-port N]`: the local Workers edge
 * (wrangler-dev.ts) as a process of its own, for the stack's supervisor and the bench. Prints one
 * JSON line `{"msg":"wrangler dev ready","url"}` once it serves; SIGTERM/SIGINT stop workerd too.
 */
import { parseArgs } from 'node:util'
import { disposeOnSignal, LOCAL_EDGE_FLAGS, localEdgeInput, optionsOrExit } from './local-edge.ts'
import { startWranglerDevEngine, WranglerDevOptions } from './wrangler-dev.ts'

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: { ...LOCAL_EDGE_FLAGS, 'log-level': { type: 'string' }, 'inspector-port': { type: 'string' } },
})
const options = optionsOrExit(WranglerDevOptions.safeParse({ ...localEdgeInput(values), logLevel: values['log-level'], inspectorPort: values['inspector-port'] }))

const dev = await startWranglerDevEngine(options)
console.log(JSON.stringify({ msg: 'wrangler dev ready', url: dev.url, inspector: options.inspectorPort !== undefined }))
disposeOnSignal(() => dev.dispose())
