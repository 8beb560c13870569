/**
 * The local Workers edge: the edge Worker under wrangler's own dev engine (`unstable_startWorker`,
 * what `wrangler dev` runs), reading wrangler.toml (main, compatibility date and flags, rules,
 * [vars], bindings) and an env file like `wrangler dev --env-file`, on workerd — but with the
 * DevTools inspector off.
 *
 * Why (measured, edge/README.md "wrangler dev and streams"): with the inspector on, as
 * `wrangler dev` always has it, wrangler enables the DevTools Network domain on the Worker's
 * runtime; workerd then sends one `Network.dataReceived` message per body chunk of every
 * subrequest (803 for one 400-token stream), and wrangler's InspectorProxyWorker — in the same
 * workerd thread as the ProxyWorker that relays every response to the client — posts each one to
 * wrangler's Node process as a debug-log request and keeps it in a buffer that is only drained
 * when DevTools attaches. Eight concurrent streams then stalled for 5–15 s and arrived in one
 * burst, the same with a Worker that only does `return fetch(upstream)`; with the inspector off
 * they arrive smoothly. `wrangler dev` has no flag to turn it off; this API does.
 *
 * `inspectorPort` turns it back on (a debugger session), with the stall.
 */
import { z } from 'zod'
import { LocalEdgeOptions } from './local-edge.ts'

/** persistTo's default is wrangler's `.wrangler/state`. */
export const WranglerDevOptions = LocalEdgeOptions.extend({
  logLevel: z.enum(['debug', 'info', 'log', 'warn', 'error', 'none']).default('log'),
  /** DevTools inspector port: on only when given (streams stall with it, see above). */
  inspectorPort: z.coerce.number().int().min(1).max(65535).optional(),
})
export type WranglerDevOptions = z.infer<typeof WranglerDevOptions>

export interface WranglerDev {
  url: string
  dispose(): Promise<void>
}

export async function startWranglerDevEngine(input: z.input<typeof WranglerDevOptions>): Promise<WranglerDev> {
  const o = WranglerDevOptions.parse(input)
  // Loaded here, not at module load: wrangler's module takes seconds to import.
  const { unstable_startWorker } = await import('wrangler')
  const worker = await unstable_startWorker({
    config: o.config,
    envFiles: [o.envFile],
    dev: {
      server: { hostname: o.ip, port: o.port },
      inspector: o.inspectorPort !== undefined ? { hostname: o.ip, port: o.inspectorPort } : false,
      ...(o.persistTo ? { persist: o.persistTo } : {}),
      logLevel: o.logLevel,
      watch: o.watch,
      liveReload: false,
    },
  })
  await worker.ready
  const url = await worker.url
  return { url: url.origin, dispose: () => worker.dispose() }
}
