/**
 * Graceful shutdown (DESIGN.md §5): stop admitting (readyz 503, overload answers, heartbeat
 * `draining: true`), let the engine finish every admitted stream, HDEL from the registry, close
 * the listener, stop the engine. Signals: the first SIGTERM/SIGINT starts the drain; repeats
 * (npm forwards the terminal's SIGINT as well) join it; a SIGINT later than the grace period
 * means the operator insists, and the process exits at once.
 */
import type { EngineHandle } from './engine/types.ts'
import type { Heartbeat } from './registry/heartbeat.ts'
import type { NodeServer } from './server/http.ts'
import type { Logger } from './server/json-log.ts'
import type { NodeState } from './server/node-state.ts'

export interface DrainDeps {
  state: NodeState
  engine: EngineHandle
  server: NodeServer
  log: Logger
  heartbeat?: Heartbeat
}

/** Returns an idempotent drain: every call gets the same promise. */
export function createDrain(deps: DrainDeps): () => Promise<void> {
  let running: Promise<void> | undefined
  return () => (running ??= drain(deps))
}

async function drain({ state, engine, server, log, heartbeat }: DrainDeps): Promise<void> {
  state.draining = true
  const { running, waiting } = engine.stats()
  log.info({ msg: 'draining', running, waiting })
  void heartbeat?.beat() // tell edges now, not at the next tick
  await engine.drain()
  await heartbeat?.stop()
  await server.close()
  await engine.close()
  log.info({ msg: 'drained' })
}

/** The part of `process` signal handling needs; tests pass an EventEmitter. */
export interface SignalSource {
  on(signal: 'SIGTERM' | 'SIGINT', listener: () => void): unknown
}

export interface SignalHandlerOptions {
  drain: () => Promise<void>
  /** A SIGINT this long after the first signal forces exit; earlier ones join the drain. */
  graceMs: number
  exit: (code: number) => void
  log: Logger
  source?: SignalSource
  now?: () => number
}

export function handleShutdownSignals(opts: SignalHandlerOptions): void {
  const source = opts.source ?? process
  const now = opts.now ?? Date.now
  let firstSignalMs: number | undefined
  const onSignal = (signal: 'SIGTERM' | 'SIGINT') => {
    if (firstSignalMs === undefined) {
      firstSignalMs = now()
      opts.log.info({ msg: 'shutdown requested', signal })
      opts.drain().then(
        () => opts.exit(0),
        (e: unknown) => {
          opts.log.error({ msg: 'drain failed', error: e instanceof Error ? e.name : 'unknown' })
          opts.exit(1)
        },
      )
      return
    }
    if (signal === 'SIGINT' && now() - firstSignalMs >= opts.graceMs) {
      opts.log.warn({ msg: 'forced exit', signal })
      opts.exit(130)
    }
  }
  source.on('SIGTERM', () => onSignal('SIGTERM'))
  source.on('SIGINT', () => onSignal('SIGINT'))
}
