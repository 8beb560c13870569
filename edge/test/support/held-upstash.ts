/**
 * A slow Upstash, for tests: an HTTP stand-in in front of a real Upstash REST endpoint (the local
 * bridge) that forwards every call except those `hold` picks, which it keeps unanswered until
 * `release()`, after which it forwards everything — Redis hanging for one kind of command (the rate limiter's scripts, say) while
 * the rest of the store answers. Listens on 127.0.0.1 only.
 */
import { once } from 'node:events'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface HeldUpstash {
  url: string
  /** Calls held right now. */
  readonly held: number
  /** Forwards every held call (answered as it would have been) and holds nothing from now on. */
  release(): void
  close(): Promise<void>
}

export async function startHeldUpstash(target: string, hold: (body: string) => boolean): Promise<HeldUpstash> {
  const waiting: Array<() => void> = []
  let holding = true
  const forward = async (req: IncomingMessage, body: string, res: ServerResponse) => {
    try {
      // Every header but the hop's own: Upstash-Encoding decides how the answer is encoded.
      const headers = Object.entries(req.headers).filter(([name]) => !['host', 'connection', 'content-length'].includes(name)).map(([name, v]) => [name, String(v)] as [string, string])
      const answer = await fetch(`${target}${req.url ?? '/'}`, { method: 'POST', headers, body })
      const out: Record<string, string> = { 'content-type': 'application/json' }
      const sync = answer.headers.get('upstash-sync-token')
      if (sync) out['upstash-sync-token'] = sync
      res.writeHead(answer.status, out)
      res.end(await answer.text())
    } catch {
      res.destroy()
    }
  }
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8')
      if (holding && hold(body)) waiting.push(() => void forward(req, body, res))
      else void forward(req, body, res)
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get held() {
      return waiting.length
    },
    release() {
      holding = false
      for (const answer of waiting.splice(0)) answer()
    },
    async close() {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
