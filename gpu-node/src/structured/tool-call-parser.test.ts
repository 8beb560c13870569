/**
 * The tool-call parser on fixed model text, split every way a stream may split it: whatever the
 * deltas, the pieces join to the same content and calls as the whole text read at once (a call
 * that arrives in one delta included), and a call's id and name come before its arguments.
 */
import { describe, expect, it } from 'vitest'
import type { ToolCall } from '../../../shared/src/generation.ts'
import { toolCallFormat } from './tool-call-format.ts'
import { ToolCallParser, type ParsedPiece } from './tool-call-parser.ts'

const hermes = toolCallFormat('hermes')
const llama = toolCallFormat('llama3_json')
const id = (i: number) => `call_${i}`

/** Content and calls from pieces, checking the stream's order rules on the way. */
function assemble(pieces: ParsedPiece[]): { content: string; calls: ToolCall[] } {
  let content = ''
  const calls: ToolCall[] = []
  for (const p of pieces) {
    if (p.type === 'text') {
      content += p.text
      continue
    }
    const d = p.delta
    if (d.id !== undefined) {
      expect(d.index).toBe(calls.length)
      calls.push({ id: d.id, name: d.name!, arguments: d.arguments })
    } else {
      expect(d.index).toBe(calls.length - 1)
      calls[d.index]!.arguments += d.arguments
    }
  }
  return { content, calls }
}

function parse(format: typeof hermes, deltas: string[]): { content: string; calls: ToolCall[] } {
  const parser = new ToolCallParser(format, id)
  return assemble([...deltas.flatMap((d) => parser.push(d)), ...parser.flush()])
}

/** Every split of `text` into two deltas, and one character a delta. */
function splits(text: string): string[][] {
  const out = [[text], [...text]]
  for (let i = 1; i < text.length; i++) out.push([text.slice(0, i), text.slice(i)])
  return out
}

const call = (name: string, args: string) => `<tool_call>\n{"name": "${name}", "arguments": ${args}}\n</tool_call>`

describe('ToolCallParser (hermes)', () => {
  it('reads calls and the text before them the same way however the text is split', () => {
    const text = `Let me check.\n${call('get_weather', '{"city":"Paris","tags":["a}","b\\"]"]}')}\n${call('get_time', '{}')}`
    const expected = {
      content: 'Let me check.\n',
      calls: [
        { id: 'call_0', name: 'get_weather', arguments: '{"city":"Paris","tags":["a}","b\\"]"]}' },
        { id: 'call_1', name: 'get_time', arguments: '{}' },
      ],
    }
    for (const deltas of splits(text)) expect(parse(hermes, deltas)).toEqual(expected)
  })

  it('gives a whole call in one delta its id, name and every argument', () => {
    const parser = new ToolCallParser(hermes, id)
    const pieces = parser.push(call('f', '{"a":1}'))
    expect(pieces).toEqual([{ type: 'call', delta: { index: 0, id: 'call_0', name: 'f', arguments: '{"a":1}' } }])
  })

  it('streams arguments as they come, after the call\'s head', () => {
    const parser = new ToolCallParser(hermes, id)
    expect(parser.push('<tool_call>\n{"name": "f", "argu')).toEqual([])
    expect(parser.push('ments": {"a":')).toEqual([{ type: 'call', delta: { index: 0, id: 'call_0', name: 'f', arguments: '{"a":' } }])
    expect(parser.push('12}')).toEqual([{ type: 'call', delta: { index: 0, arguments: '12}' } }])
    expect(parser.push('}\n</tool_call>')).toEqual([])
    expect(parser.calls).toBe(1)
  })

  it('passes plain text through, holding back only what may start a call', () => {
    const parser = new ToolCallParser(hermes, id)
    expect(parser.push('a < b and <tool')).toEqual([{ type: 'text', text: 'a < b and ' }])
    expect(parser.push('box>')).toEqual([{ type: 'text', text: '<toolbox>' }])
    expect(parser.flush()).toEqual([])
    expect(parse(hermes, ['no calls, ends with <tool_'])).toEqual({ content: 'no calls, ends with <tool_', calls: [] })
  })

  it('keeps text after a call but drops the whitespace between calls', () => {
    expect(parse(hermes, [`${call('f', '{}')}\n\nDone.`])).toEqual({ content: '\n\nDone.', calls: [{ id: 'call_0', name: 'f', arguments: '{}' }] })
    expect(parse(hermes, [`${call('f', '{}')}\n \n`])).toEqual({ content: '', calls: [{ id: 'call_0', name: 'f', arguments: '{}' }] })
  })

  it('a trigger with no call after it is text', () => {
    const junk = `<tool_call>${'x'.repeat(300)} and more`
    expect(parse(hermes, [junk])).toEqual({ content: junk, calls: [] })
  })

  it('a call cut short keeps the arguments it had (the answer ended at its length limit)', () => {
    expect(parse(hermes, ['<tool_call>\n{"name": "f", "arguments": {"a":"par'])).toEqual({ content: '', calls: [{ id: 'call_0', name: 'f', arguments: '{"a":"par' }] })
  })
})

describe('ToolCallParser (llama3_json)', () => {
  it('reads `{"name": …, "parameters": …}` calls separated by `; `', () => {
    const text = '{"name": "get_weather", "parameters": {"city":"Paris"}}; {"name": "get_time", "parameters": {}}'
    for (const deltas of splits(text)) {
      expect(parse(llama, deltas)).toEqual({ content: '', calls: [{ id: 'call_0', name: 'get_weather', arguments: '{"city":"Paris"}' }, { id: 'call_1', name: 'get_time', arguments: '{}' }] })
    }
  })
})
