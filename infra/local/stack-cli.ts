/**
 * `npm start [-- --regions N] [--nodes-per-region N] [--edge miniflare|wrangler|wrangler-inspector|node] [--model DIR] [--wan] [--rtt A:B=MS,…]`: the whole local stack in the
 * foreground. Ctrl-C stops everything; a critical service dying stops everything with the reason.
 */
import { LOCAL, stackNodes, type StackOptions } from './stack-config.ts'
import { parseStackFlags } from './stack-flags.ts'
import { EDGE_DESCRIPTION, startStack, type RunningStack } from './stack.ts'

/** The edge kinds slower than the default, said under the edge line (edge/README.md "wrangler dev and streams"). */
const SLOWER: Partial<Record<StackOptions['edge'], string>> = {
  wrangler: '              every request also crosses wrangler\'s ProxyWorker: at 64 concurrent streams TTFB p50 2-3x the default\'s (no --edge)\n',
  'wrangler-inspector': '              concurrent streams stall for seconds under the DevTools inspector: use it for a debugger only\n',
}

function banner(opts: StackOptions, stack: RunningStack): string {
  const model = opts.modelDir.replace(/\/+$/, '').split('/').pop()
  const url = stack.edgeUrl
  const links = new Map(stack.wan.links.map((l) => [l.nodeId, l]))
  const nodes = stackNodes(opts)
    .map((n) => `${n.id} http://${LOCAL.host}:${n.port}${links.has(n.id) ? `   (the edge reaches it via ${links.get(n.id)!.relay.url}, RTT ${links.get(n.id)!.rttMs} ms)` : ''}`)
    .join('\n              ')
  const wan = stack.wan.describe()
  return `
zerolayer local stack is up
  edge        ${url}   (${EDGE_DESCRIPTION[opts.edge]})
${SLOWER[opts.edge] ?? ''}  dashboard   ${url}/dashboard
  nodes       ${nodes}
  WAN         ${wan.length > 0 ? wan.join('\n              ') : 'off: every node direct (--wan for real RTTs between regions)'}
  dev API key ${opts.devApiKey}   (tenant "dev")
  admin token ${opts.adminToken}
  logs        .stack/logs/

  curl -N ${url}/v1/chat/completions -H 'authorization: Bearer ${opts.devApiKey}' \\
    -H 'content-type: application/json' \\
    -d '{"model":"${model}","messages":[{"role":"user","content":"Hello"}],"max_tokens":32,"stream":true}'

  // OpenAI SDK
  const client = new OpenAI({ baseURL: '${url}/v1', apiKey: '${opts.devApiKey}' })
  const r = await client.chat.completions.create({ model: '${model}', messages: [{ role: 'user', content: 'Hello' }] })

Ctrl-C stops everything.
`
}

async function main(): Promise<void> {
  const opts = parseStackFlags(process.argv.slice(2), process.env)
  const status = (line: string) => process.stdout.write(`[stack] ${line}\n`)
  let stack: RunningStack | undefined
  let stopping = false
  const stop = async (code: number) => {
    if (stopping) return
    stopping = true
    await stack?.stop()
    process.exit(code)
  }
  const events = {
    status,
    fatal: (name: string, reason: string) => {
      process.stderr.write(`[stack] ${name} died: ${reason}\n[stack] stopping the stack\n`)
      void stop(1)
    },
  }
  process.on('SIGINT', () => void stop(0))
  process.on('SIGTERM', () => void stop(0))
  try {
    stack = await startStack(opts, events)
  } catch (e) {
    process.stderr.write(`[stack] could not start: ${(e as Error).message}\n`)
    process.exit(1)
  }
  if (stopping) return
  process.stdout.write(banner(opts, stack))
}

void main()
