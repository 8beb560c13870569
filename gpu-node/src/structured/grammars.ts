/**
 * A model's grammars, in the thread that samples: the tokenizer's info is built once (the first
 * constrained request pays it), each distinct constraint is compiled once and kept (most-recent
 * first, MAX_COMPILED of them), and every constrained sequence gets its own matcher.
 *
 * JSON is compiled compact (`{"a":1,"b":[2]}`: no whitespace between tokens, `,` and `:` as
 * separators), so an answer to a bounded schema always completes within its size, whatever
 * whitespace the model would prefer; strict mode, as OpenAI's structured outputs: no property or
 * item the schema does not name.
 */
import type { OutputConstraint } from '../../../shared/src/generation.ts'
import { xgrammar, type CompiledGrammar, type GrammarCompiler } from './xgrammar.ts'
import { GrammarConstraint } from './grammar-constraint.ts'
import { controlByteTokens, tokenBytes, type EncodedVocab } from './tokenizer-info.ts'
import { Utf8Rules } from './utf8-guard.ts'
import { toolCallFormat, type ToolCallFormatName } from './tool-call-format.ts'
import type { TokenRules } from './grammar-constraint.ts'

/** Compiled grammars kept for reuse. */
export const MAX_COMPILED = 64

export class Grammars {
  private compiler: Promise<GrammarCompiler> | undefined
  private readonly compiled = new Map<string, Promise<CompiledGrammar>>()
  private rules: { json: TokenRules; text: TokenRules } | undefined

  constructor(
    private readonly vocab: EncodedVocab,
    private readonly stopTokenIds: readonly number[],
  ) {}

  /** A fresh matcher for one sequence. Rejects when the spec cannot be compiled (its message names why). */
  async constraint(spec: OutputConstraint): Promise<GrammarConstraint> {
    const grammar = await this.compile(spec)
    const matcher = await xgrammar().GrammarMatcher.createGrammarMatcher(grammar)
    return new GrammarConstraint(matcher, this.vocab.tokens.length, this.tokenRules(spec))
  }

  /** The spec's compiled grammar, compiled on first use. */
  compile(spec: OutputConstraint): Promise<CompiledGrammar> {
    const key = keyOf(spec)
    const hit = this.compiled.get(key)
    if (hit) {
      this.compiled.delete(key)
      this.compiled.set(key, hit)
      return hit
    }
    const made = this.compileNew(spec)
    this.compiled.set(key, made)
    // A failed compile is not kept: the same spec fails the same way, cheaply, next time too.
    made.catch(() => this.compiled.delete(key))
    while (this.compiled.size > MAX_COMPILED) this.compiled.delete(this.compiled.keys().next().value!)
    return made
  }

  /** Drops a spec's compiled grammar from the cache (the caller disposes it). */
  forget(spec: OutputConstraint): void {
    this.compiled.delete(keyOf(spec))
  }

  private async compileNew(spec: OutputConstraint): Promise<CompiledGrammar> {
    const compiler = await this.compilerOnce()
    // (schema, anyWhitespace, indent (-1: none), separators, strictMode, maxWhitespaceCnt).
    // json_object is any object (OpenAI's JSON mode), not xgrammar's builtin grammar of any value.
    if (spec.kind === 'json_object') return compiler.compileJSONSchema('{"type":"object"}', false, -1, [',', ':'], false, undefined)
    if (spec.kind === 'tool_calls') return compiler.compileStructuralTag(await toolCallTag(spec))
    return compiler.compileJSONSchema(spec.schema, false, -1, [',', ':'], true, undefined)
  }

  /**
   * Whole UTF-8 characters where tokens may hold parts of one (utf8-guard.ts); a JSON answer
   * never a raw control byte (controlByteTokens says why). Tool calls are text around JSON
   * (newlines in their tags, whatever the model writes before a call): their grammar keeps
   * control bytes out of the arguments' strings itself (toolCallTag).
   */
  private tokenRules(spec: OutputConstraint): TokenRules {
    if (!this.rules) {
      const bytes = this.vocab.vocabType === 'raw' ? undefined : tokenBytes(this.vocab)
      const utf8 = bytes ? new Utf8Rules(bytes, this.stopTokenIds) : undefined
      // Tokens the UTF-8 rules refuse in every state need no second ban.
      const banned = new Set(controlByteTokens(this.vocab).filter((t) => !utf8 || utf8.everAllows(t)))
      this.rules = { json: { banned, ...(utf8 ? { utf8 } : {}) }, text: { banned: new Set(), ...(utf8 ? { utf8 } : {}) } }
    }
    return spec.kind === 'tool_calls' ? this.rules.text : this.rules.json
  }

  private compilerOnce(): Promise<GrammarCompiler> {
    this.compiler ??= (async () => {
      const { TokenizerInfo, GrammarCompiler } = xgrammar()
      const info = await TokenizerInfo.createTokenizerInfo(this.vocab.tokens, this.vocab.vocabType, this.vocab.prependSpace, this.vocab.tokens.length, [...this.stopTokenIds])
      // The engine's own cache off: a compile that fails aborts mid-way and leaves its cache entry
      // pending, and the next compile of the same spec then waits on it forever, stalling the
      // thread. Compiled grammars are kept here instead, never a failed one.
      return GrammarCompiler.createGrammarCompiler(info, false)
    })()
    return this.compiler
  }
}

/**
 * Tool calls as xgrammar's structural tag: in `auto` mode free text, where the format's trigger
 * starts one of the tools' calls (and text may follow); `required` is calls only, back to back
 * with the format's separator, then the end; without parallel calls the answer ends after the first. Each call's arguments are its schema's compact JSON (no whitespace
 * between tokens, so every call completes within its schema's size), with control bytes kept out
 * of length-bounded strings, which the engine's own rule lets through.
 */
async function toolCallTag(spec: Extract<OutputConstraint, { kind: 'tool_calls' }>): Promise<string> {
  const format = toolCallFormat(spec.format as ToolCallFormatName)
  const tags = await Promise.all(spec.tools.map(async (tool) => {
    const grammar = await xgrammar().Grammar.fromJSONSchema(tool.schema, false, -1, [',', ':'], tool.strict)
    const ebnf = grammar.toString().replaceAll('[^\\"\\\\\\r\\n]', '[^\\0-\\x1f\\"\\\\\\r\\n]')
    grammar.dispose()
    return { type: 'tag', begin: format.begin(tool.name), content: { type: 'grammar', grammar: ebnf }, end: format.end }
  }))
  const calls = spec.mode === 'auto'
    ? { type: 'triggered_tags', triggers: [format.trigger], tags, stop_after_first: !spec.parallel }
    : { type: 'tags_with_separator', separator: format.separator, tags, at_least_one: true, stop_after_first: !spec.parallel }
  return JSON.stringify({ type: 'structural_tag', format: calls })
}

function keyOf(spec: OutputConstraint): string {
  return spec.kind === 'json_schema' ? `s:${spec.schema}` : spec.kind === 'tool_calls' ? `t:${JSON.stringify(spec)}` : 'o'
}
