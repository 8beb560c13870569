import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { apiErrorOf } from '../../../shared/test/support/api-error-of.ts'
import { ChatTemplate } from './chat-template.ts'
import { readModelDir } from './model-dir.ts'

/**
 * What real templates use (Llama 3.x, Mistral, Qwen): namespace() state across the loop, loop
 * controls, system-message handling, raise_exception for conversations they refuse, and
 * strftime_now for today's date.
 */
const REAL_FEATURES = `{%- set ns = namespace(system=none, turns=0) -%}
{%- for m in messages -%}
{%- if ns.turns == 3 -%}{%- break -%}{%- endif -%}
{%- if m.role == 'system' -%}
{%- if not loop.first -%}{{ raise_exception('The system message must come first.') }}{%- endif -%}
{%- set ns.system = m.content -%}{%- continue -%}
{%- endif -%}
{%- if m.role == 'tool' -%}{{ raise_exception('no ' + m.role + ' messages') }}{%- endif -%}
{%- if (m.role == 'user') != (ns.turns % 2 == 0) -%}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{%- endif -%}
{%- set ns.turns = ns.turns + 1 -%}
[{{ m.role }}]{% if ns.system and ns.turns == 1 %}({{ ns.system }}) {% endif %}{{ m.content | trim }}
{% endfor -%}
{%- if add_generation_prompt -%}[assistant {{ strftime_now('%Y') }}]{%- endif -%}`

const dirs: string[] = []
/** A copy of the tiny model directory with its template files as given. */
function modelDirWith(files: { jinja?: string; configTemplate?: string | null }) {
  const dir = join(mkdtempSync(join(tmpdir(), 'zl-template-')), 'tiny')
  cpSync('models/tiny', dir, { recursive: true })
  dirs.push(dir)
  const configPath = join(dir, 'tokenizer_config.json')
  const config = JSON.parse(readFileSync(configPath, 'utf8')) as Record<string, unknown>
  if (files.configTemplate === null) delete config.chat_template
  else if (files.configTemplate !== undefined) config.chat_template = files.configTemplate
  writeFileSync(configPath, JSON.stringify(config))
  if (files.jinja !== undefined) writeFileSync(join(dir, 'chat_template.jinja'), files.jinja)
  return readModelDir(dir)
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(join(d, '..'), { recursive: true, force: true })
})


describe('ChatTemplate', () => {
  it('takes chat_template.jinja over tokenizer_config.json, which it takes over ChatML', () => {
    expect(new ChatTemplate(modelDirWith({ jinja: '{{ "from the file" }}', configTemplate: '{{ "from the config" }}' }))).toMatchObject({ source: 'chat_template.jinja' })
    expect(new ChatTemplate(modelDirWith({ jinja: '{{ "from the file" }}' })).render([])).toBe('from the file')
    const configured = new ChatTemplate(modelDirWith({ configTemplate: '{{ "from the config" }}' }))
    expect([configured.source, configured.render([])]).toEqual(['tokenizer_config.json', 'from the config'])
    const none = new ChatTemplate(modelDirWith({ configTemplate: null }))
    expect([none.source, none.render([{ role: 'user', content: 'hi' }])]).toEqual(['ChatML fallback', '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n'])
  })

  it("renders what real templates use: namespace, loop controls, the system message, strftime_now", () => {
    const t = new ChatTemplate(modelDirWith({ jinja: REAL_FEATURES }))
    const rendered = t.render([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: ' Hi ' },
      { role: 'assistant', content: 'Hello.' },
      { role: 'user', content: 'Bye' },
      { role: 'assistant', content: 'cut by the break' },
    ])
    expect(rendered).toBe(`[user](Be brief.) Hi\n[assistant]Hello.\n[user]Bye\n[assistant ${new Date().getFullYear()}]`)
  })

  it("answers a conversation the template refuses with a 400 in the author's words", () => {
    const t = new ChatTemplate(modelDirWith({ jinja: REAL_FEATURES }))
    const e = apiErrorOf(() => t.render([{ role: 'user', content: 'a' }, { role: 'user', content: 'b' }]))
    expect({ code: e.code, param: e.param }).toEqual({ code: 'invalid_request', param: 'messages' })
    expect(e.message).toContain('Conversation roles must alternate user/assistant')
    expect(apiErrorOf(() => t.render([{ role: 'user', content: 'a' }, { role: 'system', content: 's' }])).message).toContain('The system message must come first.')
  })

  it("echoes only the template's literal words, never text built from the request", () => {
    const t = new ChatTemplate(modelDirWith({ jinja: REAL_FEATURES }))
    const e = apiErrorOf(() => t.render([{ role: 'tool' as 'user', content: 'secret prompt' }]))
    expect(e.message).toBe("The model's chat template does not accept these messages.")
  })
})
