/** The GET routes: model list, liveness, readiness, Prometheus metrics. */
import type { NodeMetrics } from '../metrics/node-metrics.ts'
import type { PromptEncoder } from '../model/prompt-encoder.ts'
import type { ServerRequest, ServerResponse } from './http-types.ts'
import type { NodeState } from './node-state.ts'
import { sendJson, sendText } from './respond.ts'

/** Epoch seconds the model list reports as `created`: when this process started serving. */
const STARTED_S = Math.floor(Date.now() / 1000)

/** OpenAI's list shape, plus vLLM's `max_model_len` so clients can size prompts. */
export function sendModels(req: ServerRequest, res: ServerResponse, encoder: PromptEncoder): void {
  sendJson(req, res, 200, {
    object: 'list',
    data: [{ id: encoder.modelId, object: 'model', created: STARTED_S, owned_by: 'zerolayer', max_model_len: encoder.contextLength }],
  })
}

export function sendHealth(req: ServerRequest, res: ServerResponse): void {
  sendJson(req, res, 200, { status: 'ok' })
}

/** 200 only while the model is loaded and the node admits work: load balancers and edges route on it. */
export function sendReadiness(req: ServerRequest, res: ServerResponse, state: NodeState): void {
  const ready = state.ready && !state.draining
  const status = state.draining ? 'draining' : state.ready ? 'ready' : 'loading'
  sendJson(req, res, ready ? 200 : 503, { status }, { 'cache-control': 'no-store' })
}

export async function sendMetrics(req: ServerRequest, res: ServerResponse, metrics: NodeMetrics): Promise<void> {
  sendText(req, res, 200, await metrics.render(), metrics.contentType)
}
