/**
 * Prompts of an exact token length for a model directory, so "32-token prompts" means 32 tokens
 * as the node counts them: after the chat template (chat/messages) or as plain text
 * (completions).
 */
import { statSync } from 'node:fs'
import { join } from 'node:path'
import { seededRandom } from '../../shared/test/support/seeded-random.ts'
import { ChatTemplate } from '../../gpu-node/src/model/chat-template.ts'
import { readModelDir } from '../../gpu-node/src/model/model-dir.ts'
import { ModelTokenizer } from '../../gpu-node/src/model/tokenizer.ts'

/** Draws per variant before settling for the closest count below the target. */
const ATTEMPTS = 64
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
  return remembered(`chat ${modelDir} ${target} ${variant}`, modelDir, ({ tok, template }) => search((text) => tok.encodeTemplate(template.render([{ role: 'user', content: text }])).length, target, variant))
}

/** A completions prompt of exactly `target` tokens (closest below when not reachable). */
export function textPromptOfLength(modelDir: string, target: number, variant = 0): ExactPrompt {
  return remembered(`text ${modelDir} ${target} ${variant}`, modelDir, ({ tok }) => search((text) => tok.encodeText(text).length, target, variant))
}

/**
 * A prompt is searched for once per process: a closed-loop load generator asks again for every
 * request, and a search (a tokenizer read from disk, a word count re-encoded ~100 times) costs
 * 14–20 ms of CPU on the cores the node under test shares. Keyed by the tokenizer file's mtime
 * too, as a section may regenerate a model directory it already read.
 */
const prompts = new Map<string, ExactPrompt>()
const tokenizers = new Map<string, { tok: ModelTokenizer; template: ChatTemplate }>()
function remembered(key: string, modelDir: string, find: (t: { tok: ModelTokenizer; template: ChatTemplate }) => ExactPrompt): ExactPrompt {
  const version = `${modelDir} ${statSync(join(modelDir, 'tokenizer.json')).mtimeMs}`
  const full = `${key} ${version}`
  let prompt = prompts.get(full)
  if (!prompt) {
    let t = tokenizers.get(version)
    if (!t) {
      const dir = readModelDir(modelDir)
      t = { tok: new ModelTokenizer(dir), template: new ChatTemplate(dir) }
      tokenizers.set(version, t)
    }
    prompt = find(t)
    prompts.set(full, prompt)
  }
  return prompt
}

/**
 * Words drawn at random, seeded by (variant, target, attempt), until the count is `target`; a
 * draw that overshoots is tried again with the next attempt's words. Each variant and length is
 * its own word sequence from the first word on, so no two share a prefix-cache block. (Windows of
 * one fixed word cycle, as before, gave only 8 distinct 48-token prompts across 26 variants:
 * "fresh" prompts hit the prefix cache.)
 */
function search(count: (text: string) => number, target: number, variant: number): ExactPrompt {
  let best: ExactPrompt | undefined
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    // The length is in the seed too: variant v at 48 tokens is not the start of variant v at 160.
    const random = seededRandom(Math.imul(((variant * 4099 + target) * ATTEMPTS + attempt + 1) | 0, 0x9e3779b1))
    const words: string[] = []
    for (let n = 1; n <= target * 2; n++) {
      words.push(WORDS[Math.floor(random() * WORDS.length)]!)
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
