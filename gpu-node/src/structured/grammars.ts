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
import type { TokenRules } from './grammar-constraint.ts'

/** Compiled grammars kept for reuse. */
export const MAX_COMPILED = 64

export class Grammars {
  private compiler: Promise<GrammarCompiler> | undefined
  private readonly compiled = new Map<string, Promise<CompiledGrammar>>()
  private rules: TokenRules | undefined

  constructor(
    private readonly vocab: EncodedVocab,
    private readonly stopTokenIds: readonly number[],
  ) {}

  /** A fresh matcher for one sequence. Rejects when the spec cannot be compiled (its message names why). */
  async constraint(spec: OutputConstraint): Promise<GrammarConstraint> {
    const grammar = await this.compile(spec)
    const matcher = await xgrammar().GrammarMatcher.createGrammarMatcher(grammar)
    return new GrammarConstraint(matcher, this.vocab.tokens.length, this.tokenRules())
  }

  /** The spec's compiled grammar, compiled on first use. */
  compile(spec: OutputConstraint): Promise<CompiledGrammar> {
    const key = spec.kind === 'json_schema' ? `s:${spec.schema}` : 'o'
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

  private async compileNew(spec: OutputConstraint): Promise<CompiledGrammar> {
    const compiler = await this.compilerOnce()
    // (schema, anyWhitespace, indent (-1: none), separators, strictMode, maxWhitespaceCnt).
    // json_object is any object (OpenAI's JSON mode), not xgrammar's builtin grammar of any value.
    if (spec.kind === 'json_object') return compiler.compileJSONSchema('{"type":"object"}', false, -1, [',', ':'], false, undefined)
    return compiler.compileJSONSchema(spec.schema, false, -1, [',', ':'], true, undefined)
  }

  /**
   * Every spec today is JSON: never a raw control byte (controlByteTokens says why), and whole
   * UTF-8 characters where tokens may hold parts of one (utf8-guard.ts).
   */
  private tokenRules(): TokenRules {
    if (!this.rules) {
      const bytes = this.vocab.vocabType === 'raw' ? undefined : tokenBytes(this.vocab)
      const utf8 = bytes ? new Utf8Rules(bytes, this.stopTokenIds) : undefined
      // Tokens the UTF-8 rules refuse in every state need no second ban.
      const banned = new Set(controlByteTokens(this.vocab).filter((t) => !utf8 || utf8.everAllows(t)))
      this.rules = { banned, ...(utf8 ? { utf8 } : {}) }
    }
    return this.rules
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
