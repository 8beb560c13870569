/**
 * xgrammar (vLLM's default structured-output engine) as published for JavaScript:
 * @mlc-ai/web-xgrammar, the C++ engine compiled to WebAssembly. Its package says
 * `"type": "module"` but ships a UMD bundle, so `import` gives Node an empty module; the bundle is
 * evaluated here as the CommonJS file it is, once per thread (each worker thread that constrains
 * decoding has its own WebAssembly instance: its handles cannot cross threads).
 */
import { readFileSync } from 'node:fs'
import { createRequire, Module } from 'node:module'
import { dirname } from 'node:path'
import type { CompiledGrammar, Grammar, GrammarCompiler, GrammarMatcher, TokenizerInfo } from '@mlc-ai/web-xgrammar'

export interface Xgrammar {
  Grammar: typeof Grammar
  TokenizerInfo: typeof TokenizerInfo
  GrammarCompiler: typeof GrammarCompiler
  GrammarMatcher: typeof GrammarMatcher
}
export type { CompiledGrammar, Grammar, GrammarCompiler, GrammarMatcher, TokenizerInfo }

let loaded: Xgrammar | undefined

/** The engine, evaluated on first use in this thread. */
export function xgrammar(): Xgrammar {
  if (loaded) return loaded
  const require = createRequire(import.meta.url)
  const file = require.resolve('@mlc-ai/web-xgrammar')
  // Node's own CommonJS loader compiles it (the bundle's CommonJS branch; its `import('module')`
  // needs a loader that supports dynamic import, which a plain Function does not have).
  const cjs = new Module(file) as Module & { _compile(code: string, filename: string): void; paths: string[] }
  cjs.filename = file
  cjs.paths = (Module as unknown as { _nodeModulePaths(dir: string): string[] })._nodeModulePaths(dirname(file))
  cjs._compile(quiet(readFileSync(file, 'utf8'), file), file)
  const { Grammar, TokenizerInfo, GrammarCompiler, GrammarMatcher } = cjs.exports as Partial<Xgrammar>
  if (!Grammar || !TokenizerInfo || !GrammarCompiler || !GrammarMatcher) throw new Error(`@mlc-ai/web-xgrammar at ${file} did not export Grammar, TokenizerInfo, GrammarCompiler and GrammarMatcher`)
  loaded = { Grammar, TokenizerInfo, GrammarCompiler, GrammarMatcher }
  return loaded
}

/**
 * The engine prints to the console when a grammar fails (`[FATAL] … The JSON string is: <the
 * schema>`), and a client's text must never reach the node's log: its WebAssembly module is
 * instantiated with print and printErr that drop everything. The bundle instantiates it with no
 * options in one place; the pinned version is checked for it.
 */
function quiet(source: string, file: string): string {
  const call = 'binding = await Module();'
  if (source.split(call).length !== 2) throw new Error(`@mlc-ai/web-xgrammar at ${file}: expected one '${call}' (a version other than the pinned one?)`)
  return source.replace(call, 'binding = await Module({ print() {}, printErr() {} });')
}
