/**
 * Grammar-constrained decoding without a model: a toy byte-level vocabulary (GPT-2's 256 byte
 * characters, some multi-character tokens, a special token and padding), xgrammar compiled for
 * it, and random walks that pick any allowed token. Whatever a model would prefer, a constrained
 * walk must end in a document its schema accepts; the same walks without the mask must not (the
 * control that shows the check can fail).
 */
import { describe, expect, it } from 'vitest'
import { seededRandom } from '../../../shared/test/support/seeded-random.ts'
import { codePoints, parsedObject } from '../../test/support/parsed-object.ts'
import { maskLogits } from './grammar-constraint.ts'
import type { OutputConstraint } from '../../../shared/src/generation.ts'
import { Grammars } from './grammars.ts'
import { encodedVocab } from './tokenizer-info.ts'
import { toolCallFormat } from './tool-call-format.ts'
import { ToolCallParser } from './tool-call-parser.ts'

/** GPT-2's byte → printable character map (every byte-level tokenizer's encoding). */
function byteChars(): string[] {
  const printable = [...range(33, 126), ...range(161, 172), ...range(174, 255)]
  const chars: string[] = []
  let extra = 0
  for (let b = 0; b < 256; b++) chars[b] = String.fromCodePoint(printable.includes(b) ? b : 256 + extra++)
  return chars
}
function range(a: number, b: number): number[] {
  return Array.from({ length: b - a + 1 }, (_, i) => a + i)
}

const CHARS = byteChars()
const encode = (text: string) => [...new TextEncoder().encode(text)].map((b) => CHARS[b]).join('')
const WORDS = ['{"', '":', '",', '"}', ',"', 'true', 'false', 'null', 'city', 'unit', 'days', 'tags', 'name', ' the', '\n  ', '}\n', '0.5', '12', '":["', '"]']
const EOS = 256 + WORDS.length
/** Logits are padded past the tokenizer's vocabulary, as exports with a rounded vocab_size are. */
const VOCAB_SIZE = EOS + 1 + 7

const tokenizerJson = {
  model: { type: 'BPE', vocab: Object.fromEntries([...CHARS.map((c, i) => [c, i]), ...WORDS.map((w, i) => [encode(w), 256 + i])]) },
  added_tokens: [{ id: EOS, content: '<|endoftext|>', special: true }],
  decoder: { type: 'ByteLevel' },
}
const vocab = encodedVocab(tokenizerJson, VOCAB_SIZE)
const decoder = new Map(CHARS.map((c, b) => [c, b]))
const textOf = (ids: number[]) => new TextDecoder().decode(Uint8Array.from(ids.filter((t) => t < EOS).flatMap((t) => [...vocab.tokens[t]!].map((c) => decoder.get(c)!))))

const WEATHER = {
  type: 'object',
  properties: {
    city: { type: 'string', minLength: 1, maxLength: 12 },
    unit: { enum: ['c', 'f'] },
    days: { type: 'integer', minimum: 1, maximum: 14 },
    tags: { type: 'array', items: { type: 'boolean' }, maxItems: 3 },
  },
  required: ['city', 'unit', 'days', 'tags'],
  additionalProperties: false,
}

/** A document WEATHER accepts, checked by hand (not by the engine under test). */
function isWeather(text: string): boolean {
  const o = parsedObject(text)
  if (!o) return false
  const days = o.days as number
  const tags = o.tags
  return (
    Object.keys(o).sort().join() === 'city,days,tags,unit' &&
    codePoints(o.city) >= 1 && codePoints(o.city) <= 12 &&
    (o.unit === 'c' || o.unit === 'f') &&
    Number.isInteger(days) && days >= 1 && days <= 14 &&
    Array.isArray(tags) && tags.length <= 3 && tags.every((t) => typeof t === 'boolean')
  )
}

/** Picks uniformly among the allowed tokens (flat logits, so the mask alone decides) until EOS or `limit`. */
async function walk(grammars: Grammars, spec: OutputConstraint, seed: number, constrained: boolean, limit = 400): Promise<{ ids: number[]; ended: boolean }> {
  const c = await grammars.constraint(spec)
  const random = seededRandom(seed)
  const ids: number[] = []
  try {
    while (ids.length < limit) {
      const logits = new Float32Array(VOCAB_SIZE)
      if (constrained) await c.mask(logits)
      const allowed = [...logits.keys()].filter((t) => logits[t] !== -Infinity)
      const token = allowed[Math.floor(random() * allowed.length)]!
      ids.push(token)
      if (constrained) expect(c.accept(token)).toBe(true)
      if (token === EOS) return { ids, ended: true }
    }
    return { ids, ended: false }
  } finally {
    c.dispose()
  }
}

describe('grammar-constrained decoding (xgrammar, toy byte-level vocabulary)', () => {
  const grammars = new Grammars(vocab, [EOS])
  const schema: OutputConstraint = { kind: 'json_schema', schema: JSON.stringify(WEATHER) }

  it('reads the vocabulary as xgrammar needs it: byte-level, specials and padding empty', () => {
    expect(vocab.vocabType).toBe('byte_level')
    expect(vocab.prependSpace).toBe(false)
    expect(vocab.tokens).toHaveLength(VOCAB_SIZE)
    expect(vocab.tokens[EOS]).toBe('')
    expect(vocab.tokens.slice(EOS + 1).every((t) => t === '')).toBe(true)
    expect(vocab.tokens[256]).toBe(encode('{"'))
  })

  it('every constrained walk ends, with EOS, in compact JSON its schema accepts', async () => {
    for (let seed = 1; seed <= 24; seed++) {
      const { ids, ended } = await walk(grammars, schema, seed, true)
      const text = textOf(ids)
      expect(ended, JSON.stringify(text)).toBe(true)
      expect(isWeather(text), JSON.stringify(text)).toBe(true)
      // Compact: no whitespace outside string literals.
      expect(text.replace(/"(?:[^"\\]|\\.)*"/g, '""')).not.toMatch(/\s/)
      // A special or padded id never appears before the end.
      expect(ids.slice(0, -1).every((t) => t < EOS)).toBe(true)
    }
  })

  it('control: the same walks without the mask do not', async () => {
    let valid = 0
    for (let seed = 1; seed <= 24; seed++) if (isWeather(textOf((await walk(grammars, schema, seed, false, 80)).ids))) valid++
    expect(valid).toBe(0)
  })

  it('json_object: any JSON object', async () => {
    let objects = 0
    for (let seed = 1; seed <= 8; seed++) {
      const { ids, ended } = await walk(grammars, { kind: 'json_object' }, seed, true, 2000)
      if (!ended) continue // any object is unbounded: a walk may run long, but never invalid
      expect(parsedObject(textOf(ids))).toBeDefined()
      objects++
    }
    // Some walks must end, or the check above never ran.
    expect(objects).toBeGreaterThan(0)
  })

  it('refuses a token the grammar forbids, and EOS until the document is complete', async () => {
    const c = await grammars.constraint(schema)
    const first = new Float32Array(VOCAB_SIZE)
    await c.mask(first)
    expect(first[EOS]).toBe(-Infinity)
    expect(first[256]).not.toBe(-Infinity) // {"
    expect(c.accept(CHARS.indexOf('['))).toBe(false)
    expect(c.accept(256)).toBe(true)
    expect(c.terminated).toBe(false)
    c.dispose()
  })

  it('compiles a schema once: the second request for it reuses the compiled grammar', async () => {
    const spec: OutputConstraint = { kind: 'json_schema', schema: JSON.stringify({ type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] }) }
    expect(grammars.compile(spec)).toBe(grammars.compile({ ...spec }))
  })

  it('a schema the engine cannot compile rejects, is not kept, and leaves the engine working', async () => {
    const bad: OutputConstraint = { kind: 'json_schema', schema: '{"type":"nonsense"}' }
    // Caught by hand: vitest's rejects.toThrow stalls on a WebAssembly abort's error.
    const failed = (spec: OutputConstraint) => grammars.constraint(spec).then((c) => (c.dispose(), undefined), (e: unknown) => e)
    expect(await failed(bad)).toBeInstanceOf(Error)
    expect(await failed(bad)).toBeInstanceOf(Error)
    const { ids, ended } = await walk(grammars, schema, 99, true)
    expect(ended && isWeather(textOf(ids))).toBe(true)
  })
})

describe('tool calls (structural tags, hermes format)', () => {
  const grammars = new Grammars(vocab, [EOS])
  const TIME = { type: 'object', properties: { zone: { enum: ['utc', 'cet'] } }, required: ['zone'], additionalProperties: false }
  const tools = [{ name: 'get_weather', schema: JSON.stringify(WEATHER), strict: true }, { name: 'get_time', schema: JSON.stringify(TIME), strict: true }]
  const spec = (mode: 'auto' | 'required', parallel: boolean, only?: string, format = 'hermes'): OutputConstraint => ({ kind: 'tool_calls', format, tools: only ? tools.filter((t) => t.name === only) : tools, mode, parallel })
  /** The calls of a walk's text, read by the same parser the node uses. */
  const callsOf = (text: string, format: 'hermes' | 'llama3_json' = 'hermes') => {
    const parser = new ToolCallParser(toolCallFormat(format), (i) => `c${i}`)
    const pieces = [...parser.push(text), ...parser.flush()]
    const calls: Array<{ name: string; arguments: string }> = []
    let content = ''
    for (const p of pieces) {
      if (p.type === 'text') content += p.text
      else if (p.delta.name !== undefined) calls.push({ name: p.delta.name, arguments: p.delta.arguments })
      else calls[calls.length - 1]!.arguments += p.delta.arguments
    }
    return { calls, content }
  }
  const valid = (c: { name: string; arguments: string }) => (c.name === 'get_weather' ? isWeather(c.arguments) : c.arguments === '{"zone":"utc"}' || c.arguments === '{"zone":"cet"}')

  it('required: every walk is one or more calls, each to an offered tool with arguments its schema accepts, and nothing else', async () => {
    let several = 0
    for (let seed = 1; seed <= 16; seed++) {
      const { ids, ended } = await walk(grammars, spec('required', true), seed, true, 1200)
      const text = textOf(ids)
      expect(ended, JSON.stringify(text)).toBe(true)
      const { calls, content } = callsOf(text)
      expect(content).toBe('')
      expect(calls.length).toBeGreaterThan(0)
      for (const call of calls) expect(valid(call), JSON.stringify(call)).toBe(true)
      if (calls.length > 1) several++
    }
    expect(several).toBeGreaterThan(0)
  })

  it('llama3_json: calls back to back as `{"name": …, "parameters": …}; …`, each valid, read back by the same format', async () => {
    for (let seed = 1; seed <= 8; seed++) {
      const { ids, ended } = await walk(grammars, spec('required', true, undefined, 'llama3_json'), seed, true, 1200)
      const text = textOf(ids)
      expect(ended, JSON.stringify(text)).toBe(true)
      expect(text.startsWith('{"name": "')).toBe(true)
      const { calls, content } = callsOf(text, 'llama3_json')
      expect(content).toBe('')
      expect(calls.length).toBeGreaterThan(0)
      for (const call of calls) expect(valid(call), JSON.stringify(call)).toBe(true)
    }
  })

  it('a named tool without parallel calls: exactly one call, to it', async () => {
    for (let seed = 1; seed <= 8; seed++) {
      const { ids, ended } = await walk(grammars, spec('required', false, 'get_time'), seed, true, 400)
      expect(ended).toBe(true)
      const { calls, content } = callsOf(textOf(ids))
      expect(content).toBe('')
      expect(calls).toHaveLength(1)
      expect(calls[0]!.name).toBe('get_time')
      expect(valid(calls[0]!)).toBe(true)
    }
  })

  it('auto: text is free, and a call once begun is a valid call', async () => {
    let called = 0
    for (let seed = 1; seed <= 24; seed++) {
      // Walks that lean to the trigger: half the time the next character of `<tool_call>` after
      // whatever part of it the text ends with (as a model that wants to call would).
      const c = await grammars.constraint(spec('auto', false))
      const random = seededRandom(seed)
      const ids: number[] = []
      const trigger = '<tool_call>'
      try {
        while (ids.length < 600) {
          const logits = new Float32Array(VOCAB_SIZE)
          await c.mask(logits)
          const allowed = [...logits.keys()].filter((t) => logits[t] !== -Infinity)
          const text = textOf(ids)
          let n = Math.min(text.length, trigger.length - 1)
          while (n > 0 && !text.endsWith(trigger.slice(0, n))) n--
          const next = CHARS.indexOf(trigger[n]!)
          const token = allowed.includes(next) && random() < 0.5 ? next : allowed[Math.floor(random() * allowed.length)]!
          ids.push(token)
          expect(c.accept(token)).toBe(true)
          if (token === EOS) break
        }
      } finally {
        c.dispose()
      }
      const { calls } = callsOf(textOf(ids))
      for (const call of calls) expect(valid(call), JSON.stringify(call)).toBe(true)
      // Without parallel calls the answer ends at the first call's end.
      if (calls.length > 0) expect(ids[ids.length - 1]).toBe(EOS)
      called += calls.length
    }
    expect(called).toBeGreaterThan(0)
  })

  it('control: the same walks without the mask make no valid call', async () => {
    for (let seed = 1; seed <= 16; seed++) expect(callsOf(textOf((await walk(grammars, spec('required', true), seed, false, 200)).ids)).calls.filter(valid)).toEqual([])
  })
})

describe('maskLogits', () => {
  it('keeps the tokens whose bit is set, low bit first, and nothing past the vocabulary', () => {
    const logits = new Float32Array(70).fill(1)
    const bits = new Int32Array([0b101, -1, 0])
    maskLogits(logits, bits, 66)
    expect([...logits.keys()].filter((t) => logits[t] !== -Infinity)).toEqual([0, 2, ...range(32, 63)])
  })
})

describe('encodedVocab', () => {
  it('reads SentencePiece-style tokenizers as byte_fallback with the prepended space', () => {
    const sp = encodedVocab(
      {
        model: { type: 'BPE', vocab: { '<unk>': 0, '<s>': 1, '</s>': 2, '<0x0A>': 3, '▁the': 4 } },
        added_tokens: [{ id: 1, content: '<s>', special: true }, { id: 2, content: '</s>', special: true }],
        normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '▁' }, { type: 'Replace' }] },
        decoder: { type: 'Sequence', decoders: [{ type: 'Replace' }, { type: 'ByteFallback' }, { type: 'Fuse' }] },
      },
      6,
    )
    expect(sp).toEqual({ tokens: ['<unk>', '', '', '<0x0A>', '▁the', ''], vocabType: 'byte_fallback', prependSpace: true })
  })
})
