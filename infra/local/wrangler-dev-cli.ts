/**
 * `node --import tsx infra/local/wrangler-dev-cli.ts --ip H --port P --env-file F [--config C]
 * [--persist-to D] [--log-level L] [--no-watch] [--inspector-port N]`: the local Workers edge
 * (wrangler-dev.ts) as a process of its own, for the stack's supervisor and the bench. Prints one
 * JSON line `{"msg":"wrangler dev ready","url"}` once it serves; SIGTERM/SIGINT stop workerd too.
 */
import { parseArgs } from 'node:util'
import { startWranglerDevEngine, WranglerDevOptions } from './wrangler-dev.ts'

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    config: { type: 'string' },
    ip: { type: 'string' },
    port: { type: 'string' },
    'env-file': { type: 'string' },
    'persist-to': { type: 'string' },
    'log-level': { type: 'string' },
    'no-watch': { type: 'boolean' },
    'inspector-port': { type: 'string' },
  },
})
const parsed = WranglerDevOptions.safeParse({
  config: values.config,
  ip: values.ip,
  port: values.port,
  envFile: values['env-file'],
  persistTo: values['persist-to'],
  logLevel: values['log-level'],
  watch: !values['no-watch'],
  inspectorPort: values['inspector-port'],
})
if (!parsed.success) {
  process.stderr.write(`bad flags: ${parsed.error.issues.map((i) => `--${i.path.join('.')}: ${i.message}`).join('; ')}\n`)
  process.exit(2)
}

const dev = await startWranglerDevEngine(parsed.data)
console.log(JSON.stringify({ msg: 'wrangler dev ready', url: dev.url, inspector: parsed.data.inspectorPort !== undefined }))
let stopping = false
const stop = () => {
  if (stopping) return
  stopping = true
  dev.dispose().then(
    () => process.exit(0),
    () => process.exit(1),
  )
}
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
