/**
 * One DevTools protocol session with workerd's V8 inspector (Miniflare's `inspectorPort`), on the
 * user Worker's isolate: the probes take CPU profiles (worker-profile.ts) and heap figures
 * (worker-memory.ts) through it.
 */
import { WebSocket } from 'undici'

/**
 * One DevTools session over the inspector's WebSocket: `call` sends a method and awaits its answer.
 * `targetId`: the isolate's target; by default Miniflare's user Worker (`core:user:<name>`; its
 * own, the entry and cache Workers, are the others); workerd run directly names it after its service.
 */
export async function devtools(port: number, targetId: (id: string) => boolean = (id) => id.startsWith('core:user:')) {
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as Array<{ id: string; webSocketDebuggerUrl: string }>
  const target = targets.find((t) => targetId(t.id))
  if (!target) throw new Error(`no user Worker among the inspector's targets: ${targets.map((t) => t.id).join(', ')}`)
  const ws = new WebSocket(target.webSocketDebuggerUrl)
  await new Promise((resolve, reject) => {
    ws.addEventListener('open', resolve, { once: true })
    ws.addEventListener('error', reject, { once: true })
  })
  let id = 0
  const pending = new Map<number, (m: { result?: unknown; error?: { message: string } }) => void>()
  const listeners = new Map<string, (params: unknown) => void>()
  ws.addEventListener('message', (e) => {
    const m = JSON.parse(String(e.data)) as { id?: number; method?: string; params?: unknown; result?: unknown; error?: { message: string } }
    if (m.id !== undefined) {
      pending.get(m.id)?.(m)
      pending.delete(m.id)
    } else if (m.method !== undefined) listeners.get(m.method)?.(m.params)
  })
  const call = async <T>(method: string, params: object = {}): Promise<T> => {
    const m = await new Promise<{ result?: unknown; error?: { message: string } }>((resolve) => {
      pending.set(++id, resolve)
      ws.send(JSON.stringify({ id, method, params }))
    })
    if (m.error) throw new Error(`${method}: ${m.error.message}`)
    return m.result as T
  }
  /** Events (messages without an id) of one method go to `listener`; undefined removes it. */
  const on = (method: string, listener: ((params: unknown) => void) | undefined) => {
    if (listener) listeners.set(method, listener)
    else listeners.delete(method)
  }
  return { call, on, close: () => ws.close() }
}

export type DevtoolsSession = Awaited<ReturnType<typeof devtools>>

/** A heap snapshot of the session's isolate (V8's .heapsnapshot JSON), after the full GC V8 does for it. */
export async function heapSnapshot(session: DevtoolsSession): Promise<HeapSnapshot> {
  const chunks: string[] = []
  session.on('HeapProfiler.addHeapSnapshotChunk', (p) => chunks.push((p as { chunk: string }).chunk))
  try {
    await session.call('HeapProfiler.takeHeapSnapshot', { reportProgress: false })
  } finally {
    session.on('HeapProfiler.addHeapSnapshotChunk', undefined)
  }
  return JSON.parse(chunks.join('')) as HeapSnapshot
}

export interface HeapSnapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } }
  nodes: number[]
  strings: string[]
}

/** Objects in a snapshot by kind and constructor (`object Request`, `closure fetch`, …): how many, and their own bytes. */
export function heapByConstructor(s: HeapSnapshot): Map<string, { count: number; bytes: number }> {
  const fields = s.snapshot.meta.node_fields
  const width = fields.length
  const [typeAt, nameAt, sizeAt] = [fields.indexOf('type'), fields.indexOf('name'), fields.indexOf('self_size')]
  const types = s.snapshot.meta.node_types[0]
  const out = new Map<string, { count: number; bytes: number }>()
  for (let i = 0; i < s.nodes.length; i += width) {
    const type = types[s.nodes[i + typeAt]!]!
    // Strings and numbers are named by their value: one bucket per type.
    const name = type === 'object' || type === 'closure' || type === 'native' ? `${type} ${s.strings[s.nodes[i + nameAt]!]}` : type
    const e = out.get(name) ?? { count: 0, bytes: 0 }
    e.count++
    e.bytes += s.nodes[i + sizeAt]!
    out.set(name, e)
  }
  return out
}
