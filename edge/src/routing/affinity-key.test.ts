import { describe, expect, it } from 'vitest'
import { parseMessagesRequest } from '../../../shared/src/dialects/anthropic-messages.ts'
import { parseChatCompletionRequest } from '../../../shared/src/dialects/openai-chat.ts'
import { parseCompletionRequest } from '../../../shared/src/dialects/openai-completions.ts'
import { affinityKeyOf, MESSAGE_END_UNITS, TEXT_PREFIX_CHARS } from './affinity-key.ts'

const SYSTEM = 'You are a careful assistant. '.repeat(20)

/** The OpenAI chat body of turn `n` (1-based) of a conversation that opened with `first`. */
function chatTurn(first: string, n: number, extra: Record<string, unknown> = {}) {
  const messages: { role: string; content: string }[] = [{ role: 'system', content: SYSTEM }, { role: 'user', content: first }]
  for (let i = 2; i <= n; i++) messages.push({ role: 'assistant', content: `answer ${i - 1}` }, { role: 'user', content: `follow-up ${i}` })
  return parseChatCompletionRequest({ model: 'tiny', messages, ...extra })
}

function anthropicTurn(first: string, n: number) {
  const messages: { role: string; content: string }[] = [{ role: 'user', content: first }]
  for (let i = 2; i <= n; i++) messages.push({ role: 'assistant', content: `answer ${i - 1}` }, { role: 'user', content: `follow-up ${i}` })
  return parseMessagesRequest({ model: 'tiny', max_tokens: 16, system: SYSTEM, messages })
}

const key = (gen: Parameters<typeof affinityKeyOf>[0], tenant = 't1', header?: string) => affinityKeyOf(gen, tenant, header).hash

describe('affinityKeyOf', () => {
  it('is stable across the turns of one OpenAI chat conversation and differs between conversations', () => {
    const turns = [1, 2, 3, 6].map((n) => key(chatTurn('Plan a trip to Lisbon.', n)))
    expect(new Set(turns).size).toBe(1)
    expect(key(chatTurn('Summarise this contract.', 1))).not.toBe(turns[0])
    expect(turns[0]).toMatch(/^[0-9a-f]{16}$/)
  })

  it('is stable across the turns of one Anthropic conversation (system + first message) and differs between conversations', () => {
    const turns = [1, 2, 5].map((n) => key(anthropicTurn('Plan a trip to Lisbon.', n)))
    expect(new Set(turns).size).toBe(1)
    expect(key(anthropicTurn('Plan a trip to Porto.', 1))).not.toBe(turns[0])
    const noSystem = parseMessagesRequest({ model: 'tiny', max_tokens: 16, messages: [{ role: 'user', content: 'Plan a trip to Lisbon.' }] })
    expect(key(noSystem)).not.toBe(turns[0])
  })

  it('gives the same conversation one key in both chat dialects (the node renders both through one chat template)', () => {
    expect(key(anthropicTurn('Plan a trip to Lisbon.', 3))).toBe(key(chatTurn('Plan a trip to Lisbon.', 2)))
  })

  it('takes every system message before the first user message, and none after it', () => {
    const base = [{ role: 'system', content: 'A' }, { role: 'developer', content: 'B' }, { role: 'user', content: 'hi' }]
    const withB = key(parseChatCompletionRequest({ model: 'tiny', messages: base }))
    const withoutB = key(parseChatCompletionRequest({ model: 'tiny', messages: [base[0], base[2]] }))
    expect(withB).not.toBe(withoutB)
    const lateSystem = parseChatCompletionRequest({ model: 'tiny', messages: [...base, { role: 'assistant', content: 'x' }, { role: 'system', content: 'Now be terse.' }, { role: 'user', content: 'more' }] })
    expect(key(lateSystem)).toBe(withB)
  })

  it('lets prompt_cache_key win over the prefix, and over the x-zl-context-id header', () => {
    const named = (first: string) => chatTurn(first, 1, { prompt_cache_key: 'conv-1' })
    expect(key(named('one opening'))).toBe(key(named('another opening')))
    expect(key(named('one opening'))).not.toBe(key(chatTurn('one opening', 1)))
    expect(affinityKeyOf(named('x'), 't1').source).toBe('context-id')
    expect(key(named('x'), 't1', 'conv-2')).toBe(key(named('x')))
  })

  it('reads the x-zl-context-id header for any dialect when the body names no key', () => {
    expect(key(anthropicTurn('a', 1), 't1', 'conv-9')).toBe(key(chatTurn('b', 1), 't1', ' conv-9 '))
    expect(key(anthropicTurn('a', 1), 't1', '   ')).toBe(key(anthropicTurn('a', 1)))
    expect(affinityKeyOf(anthropicTurn('a', 1), 't1', 'conv-9').source).toBe('context-id')
  })

  it('keys a completions prompt by model and its first TEXT_PREFIX_CHARS characters', () => {
    const head = 'Document: ' + 'lorem ipsum '.repeat(TEXT_PREFIX_CHARS / 12 + 1)
    const turn1 = key(parseCompletionRequest({ model: 'tiny', prompt: head + '\nQ: first?' }))
    const turn2 = key(parseCompletionRequest({ model: 'tiny', prompt: head + '\nQ: first?\nA: yes\nQ: second?' }))
    expect(turn2).toBe(turn1)
    expect(key(parseCompletionRequest({ model: 'tiny', prompt: 'Other ' + head }))).not.toBe(turn1)
    expect(key(parseCompletionRequest({ model: 'tiny-llama', prompt: head + '\nQ: first?' }))).not.toBe(turn1)
  })

  it('keys a long opening by its length, head and tail, so its cost stops growing with the body', () => {
    const pad = 'p'.repeat(MESSAGE_END_UNITS)
    const opening = (middle: string, question = ' What does it say?') => chatTurn('Read this: ' + pad + middle + pad + question, 1)
    expect(key(opening('a'.repeat(1000)))).toBe(key(opening('b'.repeat(1000))))
    expect(key(opening('a'.repeat(1000), ' What does it mean?'))).not.toBe(key(opening('a'.repeat(1000))))
    expect(key(opening('a'.repeat(1001)))).not.toBe(key(opening('a'.repeat(1000))))
    // Up to twice MESSAGE_END_UNITS a message is hashed whole: one unit anywhere changes the key.
    const short = (c: string) => chatTurn('x'.repeat(MESSAGE_END_UNITS) + c + 'x'.repeat(MESSAGE_END_UNITS - 1), 1)
    expect(key(short('y'))).not.toBe(key(short('z')))
  })

  it('differs by model and by tenant, whatever it was derived from', () => {
    const gen = chatTurn('Plan a trip to Lisbon.', 1)
    expect(key({ ...gen, model: 'small' })).not.toBe(key(gen))
    expect(key(gen, 't2')).not.toBe(key(gen, 't1'))
    const named = chatTurn('x', 1, { prompt_cache_key: 'conv-1' })
    expect(key(named, 't2')).not.toBe(key(named, 't1'))
  })
})
