import { ChatTemplate, type ChatTemplateSource } from './chat-template.ts'
import { readModelDir } from './model-dir.ts'
import { OnnxRunner } from './onnx-runner.ts'
import type { PromptEncoder } from './prompt-encoder.ts'
import { ModelTokenizer } from './tokenizer.ts'
import type { ToolCallFormatName } from '../structured/tool-call-format.ts'

export interface LoadModelOptions {
  modelDir: string
  /** The graph inside modelDir (MODEL_FILE); by default the first of model-dir.ts's MODEL_FILES present. */
  modelFile?: string
  executionProvider: 'cpu' | 'cuda'
  /** 0 or absent: ONNX Runtime chooses. */
  intraOpThreads?: number
  /** The scheduler's KV budget: the slot caches take spare rows and slots only inside it. */
  kvBudgetBytes: number
  /** Put Optimum-layout graphs on the slot KV path where exact (open-session.ts; default on). */
  slotKvEdit?: boolean
  /** Tokens per prefix-cache block (the engine's limits.prefixBlockTokens). */
  prefixBlockTokens?: number
  /** How the model writes tool calls; by default what its chat template teaches (tool-call-format.ts). */
  toolCallFormat?: ToolCallFormatName
  /** A new grammar's trial compile budget (compile-trial.ts); 0 or absent: no trial. */
  compileBudgetMs?: number
}

/** The model side, ready to run: what the engine drives and what the HTTP layer encodes with. */
export interface LoadedModel {
  runner: OnnxRunner
  /** Token ids → text, for the engine's detokenizer. */
  tokenizer: ModelTokenizer
  encoder: PromptEncoder
  served: ServedFiles
}

/** Which of the directory's files the node serves, for its start-up log. */
export interface ServedFiles {
  /** The ONNX graph, relative to the model directory. */
  graph: string
  chatTemplate: ChatTemplateSource
}

/** model dir → tokenizer + chat template + ONNX Runtime worker. Knows nothing of scheduling. */
export async function loadModel(opts: LoadModelOptions): Promise<LoadedModel> {
  const dir = readModelDir(opts.modelDir, opts.modelFile)
  const tokenizer = new ModelTokenizer(dir)
  const template = new ChatTemplate(dir)
  const runner = await OnnxRunner.start(dir, {
    executionProvider: opts.executionProvider,
    kvBudgetBytes: opts.kvBudgetBytes,
    ...(opts.prefixBlockTokens ? { prefixBlockTokens: opts.prefixBlockTokens } : {}),
    ...(opts.intraOpThreads ? { intraOpThreads: opts.intraOpThreads } : {}),
    ...(opts.slotKvEdit !== undefined ? { slotKvEdit: opts.slotKvEdit } : {}),
    ...(opts.compileBudgetMs ? { compileBudgetMs: opts.compileBudgetMs } : {}),
  })
  const encoder: PromptEncoder = {
    modelId: dir.modelId,
    contextLength: runner.info.contextLength,
    encodeChat: (messages, tools) => tokenizer.encodeTemplate(template.render(messages, tools)),
    toolCallFormat: opts.toolCallFormat ?? template.toolCallFormat,
    encodeText: (prompt) => tokenizer.encodeText(prompt),
    encodeInfill: (prefix, suffix) => tokenizer.encodeInfill(prefix, suffix),
    defaults: dir.generationDefaults,
  }
  return { runner, tokenizer, encoder, served: { graph: dir.onnxFile, chatTemplate: template.source } }
}
