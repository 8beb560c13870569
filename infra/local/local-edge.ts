/**
 * What the two local Workers edges share — wrangler's dev engine (wrangler-dev.ts) and Miniflare
 * directly (miniflare-edge.ts): the options both take, and running either as a process of its own
 * (wrangler-dev-cli.ts, miniflare-edge-cli.ts) for the stack's supervisor and the bench.
 */
import { z } from 'zod'

/** The options of both local edges; each extends them with its own. */
export const LocalEdgeOptions = z.object({
  config: z.string().min(1).default('wrangler.toml'),
  ip: z.string().min(1),
  port: z.coerce.number().int().min(0).max(65535),
  envFile: z.string().min(1),
  /** Local state (KV, caches); the default is each edge's own. */
  persistTo: z.string().min(1).optional(),
  /** Rebuild on source changes, as `wrangler dev` does (default on). */
  watch: z.boolean().default(true),
})

/** The command-line flags of LocalEdgeOptions, for node:util parseArgs. */
export const LOCAL_EDGE_FLAGS = {
  config: { type: 'string' },
  ip: { type: 'string' },
  port: { type: 'string' },
  'env-file': { type: 'string' },
  'persist-to': { type: 'string' },
  'no-watch': { type: 'boolean' },
} as const

/** The parsed flags of LOCAL_EDGE_FLAGS as LocalEdgeOptions' input. */
export function localEdgeInput(values: { config?: string; ip?: string; port?: string; 'env-file'?: string; 'persist-to'?: string; 'no-watch'?: boolean }) {
  return { config: values.config, ip: values.ip, port: values.port, envFile: values['env-file'], persistTo: values['persist-to'], watch: !values['no-watch'] }
}

/** A CLI's options, or exit 2 naming each bad flag. */
export function optionsOrExit<T>(parsed: z.ZodSafeParseResult<T>): T {
  if (parsed.success) return parsed.data
  process.stderr.write(`bad flags: ${parsed.error.issues.map((i) => `--${i.path.join('.')}: ${i.message}`).join('; ')}\n`)
  process.exit(2)
}

/** SIGTERM/SIGINT dispose the edge (workerd with it) once, then exit 0, or 1 if that failed. */
export function disposeOnSignal(dispose: () => Promise<void>): void {
  let stopping = false
  const stop = () => {
    if (stopping) return
    stopping = true
    dispose().then(
      () => process.exit(0),
      () => process.exit(1),
    )
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
}
