/**
 * `node --import tsx infra/local/miniflare-edge-cli.ts --ip H --port P --env-file F [--config C]
 * [--persist-to D] [--no-watch]`: the local Workers edge on Miniflare directly (miniflare-edge.ts)
 * as a process of its own, for the stack's supervisor and the bench. Prints one JSON line
 * `{"msg":"miniflare edge ready","url"}` once it serves; SIGTERM/SIGINT stop workerd too.
 */
import { parseArgs } from 'node:util'
import { MiniflareEdgeOptions, startMiniflareEdge } from './miniflare-edge.ts'

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    config: { type: 'string' },
    ip: { type: 'string' },
    port: { type: 'string' },
    'env-file': { type: 'string' },
    'persist-to': { type: 'string' },
    'no-watch': { type: 'boolean' },
  },
})
const parsed = MiniflareEdgeOptions.safeParse({
  config: values.config,
  ip: values.ip,
  port: values.port,
  envFile: values['env-file'],
  persistTo: values['persist-to'],
  watch: !values['no-watch'],
})
if (!parsed.success) {
  process.stderr.write(`bad flags: ${parsed.error.issues.map((i) => `--${i.path.join('.')}: ${i.message}`).join('; ')}\n`)
  process.exit(2)
}

const edge = await startMiniflareEdge(parsed.data)
console.log(JSON.stringify({ msg: 'miniflare edge ready', url: edge.url }))
let stopping = false
const stop = () => {
  if (stopping) return
  stopping = true
  edge.dispose().then(
    () => process.exit(0),
    () => process.exit(1),
  )
}
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
