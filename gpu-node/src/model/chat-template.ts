import { Template } from '@huggingface/jinja'
import type { ChatMessage } from '../../../shared/src/generation.ts'
import { ModelDirError, type ModelDir } from './model-dir.ts'

/** ChatML, for model directories that ship no template (base models). */
const FALLBACK_TEMPLATE =
  "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

/** The model's Jinja chat template (tokenizer_config.json `chat_template`), compiled once. */
export class ChatTemplate {
  private readonly template: Template
  private readonly specials: Record<string, string>

  constructor(dir: ModelDir) {
    const raw = dir.tokenizerConfig.chat_template
    const source = typeof raw === 'string' ? raw : Array.isArray(raw) ? defaultNamed(raw) : FALLBACK_TEMPLATE
    try {
      this.template = new Template(source)
    } catch (e) {
      throw new ModelDirError('tokenizer_config.json', `chat_template does not compile: ${(e as Error).message}`)
    }
    this.specials = {}
    for (const name of ['bos_token', 'eos_token', 'unk_token', 'pad_token']) {
      const v = dir.tokenizerConfig[name]
      const text = typeof v === 'string' ? v : v && typeof v === 'object' && 'content' in v ? String((v as { content: unknown }).content) : undefined
      if (text !== undefined) this.specials[name] = text
    }
  }

  render(messages: ChatMessage[]): string {
    return this.template.render({ messages, add_generation_prompt: true, ...this.specials })
  }
}

/** Newer configs may list several named templates; the one named "default" is the chat one. */
function defaultNamed(list: unknown[]): string {
  for (const t of list) {
    if (t && typeof t === 'object' && (t as { name?: unknown }).name === 'default') return String((t as { template: unknown }).template)
  }
  return FALLBACK_TEMPLATE
}
