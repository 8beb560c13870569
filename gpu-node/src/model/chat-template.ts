import { Template } from '@huggingface/jinja'
import { ApiError } from '../../../shared/src/api-error.ts'
import { clipText } from '../../../shared/src/clip-text.ts'
import type { ChatMessage, ToolSpec } from '../../../shared/src/generation.ts'
import { CHATML_TOOLS_TEMPLATE } from './chatml-template.ts'
import { CHAT_TEMPLATE_FILE, ModelDirError, type ModelDir } from './model-dir.ts'
import { detectToolCallFormat, type ToolCallFormatName } from '../structured/tool-call-format.ts'

/** ChatML (with Hermes-style tools), for model directories that ship no template (base models). */
const FALLBACK_TEMPLATE = CHATML_TOOLS_TEMPLATE

/** Where the template came from, as the node's start-up log says it. */
export type ChatTemplateSource = typeof CHAT_TEMPLATE_FILE | 'tokenizer_config.json' | 'ChatML fallback'

/**
 * The model's Jinja chat template, compiled once: `chat_template.jinja` if the directory has
 * one (as newer transformers save it), else tokenizer_config.json's `chat_template`, else ChatML.
 * @huggingface/jinja gives real templates what they use: raise_exception, strftime_now,
 * namespace, loop controls, tojson and the usual filters.
 */
export class ChatTemplate {
  readonly source: ChatTemplateSource
  private readonly template: Template
  private readonly text: string
  private readonly specials: Record<string, string>
  /** How this template teaches its model to write tool calls (the TOOL_CALL_FORMAT setting can override it). */
  readonly toolCallFormat: ToolCallFormatName

  constructor(dir: ModelDir) {
    const raw = dir.tokenizerConfig.chat_template
    const configured = typeof raw === 'string' ? raw : Array.isArray(raw) ? defaultNamed(raw) : undefined
    const [source, text]: [ChatTemplateSource, string] =
      dir.chatTemplateJinja !== undefined ? [CHAT_TEMPLATE_FILE, dir.chatTemplateJinja] : configured !== undefined ? ['tokenizer_config.json', configured] : ['ChatML fallback', FALLBACK_TEMPLATE]
    this.source = source
    this.text = text
    try {
      this.template = new Template(text)
    } catch (e) {
      throw new ModelDirError(source === CHAT_TEMPLATE_FILE ? CHAT_TEMPLATE_FILE : 'tokenizer_config.json', `chat_template does not compile: ${(e as Error).message}`)
    }
    this.specials = dir.specials.tokens
    this.toolCallFormat = detectToolCallFormat(text)
  }

  /**
   * The prompt for `messages`, with the generation prompt. A template that refuses the
   * conversation (raise_exception: roles that do not alternate, a system message where none is
   * allowed) is the client's 400, as vLLM answers it.
   */
  render(messages: ChatMessage[], tools?: readonly ToolSpec[]): string {
    try {
      const context: Record<string, unknown> = { messages, add_generation_prompt: true, ...this.specials }
      // transformers' shape: each tool as OpenAI's function tool, its schema an object.
      if (tools?.length) context.tools = tools.map((t) => ({ type: 'function', function: { name: t.name, ...(t.description ? { description: t.description } : {}), parameters: JSON.parse(t.parameters) } }))
      return this.template.render(context)
    } catch (e) {
      throw new ApiError('invalid_request', `The model's chat template does not accept these messages${this.authorsWords(e)}.`, { param: 'messages' })
    }
  }

  /**
   * The refusal in the template author's words when it is a literal of the template
   * (`raise_exception('Conversation roles must alternate…')`); anything else (an interpreter
   * error, a message built from the request's values) is not echoed.
   */
  private authorsWords(e: unknown): string {
    const why = e instanceof Error ? e.message : ''
    if (why === '' || !(this.text.includes(`'${why}'`) || this.text.includes(`"${why}"`))) return ''
    return `: ${clipText(why)}`
  }
}

/** Newer configs may list several named templates; the one named "default" is the chat one. */
function defaultNamed(list: unknown[]): string | undefined {
  for (const t of list) {
    if (t && typeof t === 'object' && (t as { name?: unknown }).name === 'default') return String((t as { template: unknown }).template)
  }
  return undefined
}
