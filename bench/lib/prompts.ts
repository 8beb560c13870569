/**
 * Prompts of an exact token length for a model directory, so "32-token prompts" means 32 tokens
 * as the node counts them: after the chat template (chat/messages) or as plain text
 * (completions).
 */
import { ChatTemplate } from '../../gpu-node/src/model/chat-template.ts'
import { readModelDir } from '../../gpu-node/src/model/model-dir.ts'
import { ModelTokenizer } from '../../gpu-node/src/model/tokenizer.ts'

const WORDS = 'the quick brown fox jumps over a lazy dog while seven bold wizards quietly vex nine jumping zebras near old stone bridges under pale autumn skies'.split(' ')

export interface ExactPrompt {
  text: string
  tokens: number
}

/**
 * A user message whose templated prompt is exactly `target` tokens (or the closest below it
 * when no word count hits it exactly), different per `variant` so prompts are not identical.
 */
export function chatPromptOfLength(modelDir: string, target: number, variant = 0): ExactPrompt {
  const dir = readModelDir(modelDir)
  const tok = new ModelTokenizer(dir)
  const template = new ChatTemplate(dir)
  return search((text) => tok.encodeTemplate(template.render([{ role: 'user', content: text }])).length, target, variant)
}

/** A completions prompt of exactly `target` tokens (closest below when not reachable). */
export function textPromptOfLength(modelDir: string, target: number, variant = 0): ExactPrompt {
  const tok = new ModelTokenizer(readModelDir(modelDir))
  return search((text) => tok.encodeText(text).length, target, variant)
}

function search(count: (text: string) => number, target: number, variant: number): ExactPrompt {
  let best: ExactPrompt | undefined
  for (let shift = 0; shift < WORDS.length; shift++) {
    const words: string[] = []
    for (let n = 1; n <= target * 2; n++) {
      words.push(WORDS[(variant * 7 + shift + n * 3) % WORDS.length])
      const text = words.join(' ')
      const c = count(text)
      if (c === target) return { text, tokens: c }
      if (c > target) break
      if (!best || c > best.tokens) best = { text, tokens: c }
    }
  }
  if (!best) throw new Error(`no prompt of at most ${target} tokens`)
  return best
}
