/**
 * `npm run edge:node`: the self-hosted edge in the foreground, configured by env (DESIGN.md §3:
 * the edge variables plus HOST, PORT (8788), TLS_CERT, TLS_KEY). SIGINT/SIGTERM close it.
 */
import { parseEdgeConfig, parseNodeServerConfig } from '../config.ts'
import { startNodeEdge } from './node-server.ts'

async function main(): Promise<void> {
  const config = parseEdgeConfig(process.env)
  const server = parseNodeServerConfig(process.env)
  const edge = await startNodeEdge(config, server)
  log({ msg: 'edge listening', url: edge.url, region: config.edgeRegion, tls: Boolean(server.tls), fallbackNodes: config.gpuNodes.length, devMode: config.devMode })
  if (config.devMode) log({ level: 'warn', msg: 'DEV_MODE is on: x-zl-client-geo is honoured (local development only)' })
  let closing = false
  const stop = (signal: string) => {
    if (closing) return
    closing = true
    log({ msg: 'edge stopping', signal })
    edge.close().then(() => process.exit(0), () => process.exit(1))
  }
  process.on('SIGINT', () => stop('SIGINT'))
  process.on('SIGTERM', () => stop('SIGTERM'))
}

function log(line: Record<string, unknown>): void {
  console.log(JSON.stringify({ level: 'info', time: new Date().toISOString(), ...line }))
}

main().catch((e: unknown) => {
  console.error(e instanceof Error ? e.message : String(e))
  process.exit(1)
})
