/**
 * The GPU node process: parse config → load the model (engine + tokenizer) → serve → heartbeat.
 * SIGTERM/SIGINT drain (shutdown.ts). Started by `npm run gpu-node`
 * (infra/scripts/launch-gpu-node.mjs), which sets the malloc environment the engine needs.
 */
import { composeEngine } from './compose-engine.ts'
import { localUrl, parseNodeConfig, type NodeConfig } from './config.ts'
import type { EngineHandle, EngineStats } from './engine/types.ts'
import type { ModelInfo } from './model/runner.ts'
import { createMetricsObserver } from './metrics/engine-observer.ts'
import { createNodeMetrics } from './metrics/node-metrics.ts'
import { createUpstashRegistryClient, startHeartbeat, type Heartbeat } from './registry/heartbeat.ts'
import { ResponsesStore } from '../../shared/src/dialects/responses-store.ts'
import { createNodeRedis } from './node-redis.ts'
import { createRequestHandler } from './server/app.ts'
import { createSignatureCheck } from './server/edge-signature.ts'
import { createNodeServer } from './server/http.ts'
import { createJsonLogger, type Logger } from './server/json-log.ts'
import { createNodeState } from './server/node-state.ts'
import { createDrain, handleShutdownSignals } from './shutdown.ts'

/** The start-up warning for a model that cannot be batched continuously without changing tokens. */
const BATCHING_MESSAGES = { 'equal-lengths': 'batching: equal-length batches only', alone: 'batching: one sequence at a time' } as const

/** A stored response is read before its continuation's first token and written before its answer's end. */
const RESPONSES_STORE_TIMEOUT_MS = 2000

/** What the gauges and heartbeat report before the engine exists. */
const IDLE_STATS: EngineStats = { running: 0, waiting: 0, maxBatch: 0, kvUsedFrac: 0, tokPerSec: 0, prefillTokPerSec: 0, draining: false }

async function main(log: Logger): Promise<void> {
  const config = readConfig()
  if (config.allowUnsigned) log.warn({ msg: 'ALLOW_UNSIGNED=1: edge signatures are NOT checked; for local direct use only' })

  const state = createNodeState()
  let engine: EngineHandle | undefined
  const metrics = createNodeMetrics({ region: config.region, stats: () => engine?.stats() ?? IDLE_STATS })
  const loaded = await composeEngine({
    modelDir: config.modelDir,
    ...(config.modelFile ? { modelFile: config.modelFile } : {}),
    executionProvider: config.executionProvider,
    intraOpThreads: config.intraOpThreads,
    slotKvEdit: config.slotKvEdit,
    ...(config.toolCallFormat ? { toolCallFormat: config.toolCallFormat } : {}),
    compileBudgetMs: config.compileBudgetMs,
    limits: config.limits,
    observer: createMetricsObserver(metrics),
  })
  engine = loaded.engine
  const model = loaded.encoder.modelId
  metrics.setModel(model)
  if (loaded.served.chatTemplate === 'ChatML fallback') {
    log.warn({ msg: 'chat template: ChatML fallback', why: 'the model directory has no chat_template.jinja and tokenizer_config.json has no chat_template' })
  }
  if (loaded.info.batching !== 'continuous') log.warn({ msg: BATCHING_MESSAGES[loaded.info.batching], why: loaded.info.batchingWhy })

  const server = createNodeServer({
    handler: createRequestHandler({
      encoder: loaded.encoder,
      engine,
      state,
      metrics,
      log,
      checkSignature: createSignatureCheck({ secret: config.edgeSharedSecret, allowUnsigned: config.allowUnsigned }),
      maxBodyBytes: config.maxBodyBytes,
      keepAliveMs: config.keepAliveMs,
      ...(config.upstash ? { responses: new ResponsesStore(createNodeRedis(config.upstash, RESPONSES_STORE_TIMEOUT_MS), config.responsesStore) } : {}),
    }),
    ...(config.tls ? { tls: config.tls } : {}),
    maxBodyBytes: config.maxBodyBytes,
  })
  const addr = await server.listen(config.port, config.host)
  const url = config.publicUrl ?? localUrl(server.protocol, config.host, addr.port)
  state.ready = true

  let heartbeat: Heartbeat | undefined
  if (config.upstash) {
    const running = engine
    heartbeat = startHeartbeat({
      client: createUpstashRegistryClient(config.upstash.url, config.upstash.token),
      node: { id: config.nodeId, url, region: config.region, lat: config.lat, lon: config.lon, models: [model] },
      stats: () => running.stats(),
      isDraining: () => state.draining,
      log,
    })
  }

  handleShutdownSignals({
    drain: createDrain({ state, engine, server, log, ...(heartbeat ? { heartbeat } : {}) }),
    graceMs: config.drainGraceMs,
    exit: (code) => exitAfterFlush(code),
    log,
  })
  log.info({ msg: 'ready', url, region: config.region, model, ...loaded.served, batching: loaded.info.batching, kvType: loaded.info.kvType, ...kvLog(loaded.info), speculation: speculationLog(config, loaded.info), nodeId: config.nodeId, pid: process.pid, registry: Boolean(heartbeat) })
}

/** The ready line's KV interface and logits positions, whether the graph was edited at load to get them, and why (model/kv-path.ts, model/last-logits-edit.ts). */
function kvLog(info: ModelInfo): { kvCache?: string; kvCacheEdited?: boolean; kvCacheWhy?: string; lastLogitsOnly?: boolean; logitsWhy?: string } {
  const logits = info.logitsPath ? { lastLogitsOnly: info.logitsPath.lastOnly, logitsWhy: info.logitsPath.why } : {}
  if (!info.kvPath) return logits
  return { kvCache: info.kvPath.kvCache, kvCacheEdited: info.kvPath.edited, kvCacheWhy: info.kvPath.why, ...logits }
}

/** SPEC_DECODING as it applies to the model served: a graph whose decode steps cannot verify drafts runs without. */
function speculationLog(config: NodeConfig, info: ModelInfo): string {
  const mode = config.limits.speculation?.mode ?? 'off'
  return mode === 'off' || info.speculation ? mode : 'off (drafts are verified on the slot KV path with continuous batching only)'
}

function readConfig(): NodeConfig {
  try {
    return parseNodeConfig(process.env)
  } catch (e) {
    process.stderr.write(`${e instanceof Error ? e.message : String(e)}\n`)
    process.exit(2)
  }
}

/** process.exit can cut off a piped stdout: let the last log lines out first. */
function exitAfterFlush(code: number): void {
  process.stdout.write('', () => process.exit(code))
}

const log = createJsonLogger()
main(log).catch((e: unknown) => {
  // Start-up failures (model dir, port in use) are ours to read: name and message, no stack dump of config.
  log.error({ msg: 'start-up failed', error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) })
  exitAfterFlush(1)
})
