/**
 * What the Dockerfile lint (dockerfile.test.ts) reads of infra/docker/gpu-node.Dockerfile: its
 * stages with the image configuration each one ends with (inherited through `FROM <stage>`), and
 * .dockerignore's matching rules. Parsing is dockerfile-ast's (line continuations, exec-form JSON,
 * flags); the semantics below are Docker's.
 */
import { readFileSync } from 'node:fs'
import { Copy as CopyInstruction, DockerfileParser, Entrypoint, Env, From, type Instruction } from 'dockerfile-ast'

export const DOCKERFILE = 'infra/docker/gpu-node.Dockerfile'

export interface Copy {
  from?: string
  chown?: string
  sources: string[]
  dest: string
}

export interface Stage {
  name: string
  /** The FROM argument with build ARG defaults substituted: an image reference or an earlier stage's name. */
  base: string
  /** The earlier stage it is built on, when `base` names one. */
  parent?: Stage
  instructions: Instruction[]
  copies: Copy[]
  runs: string[]
}

/** The image configuration a stage ends with (its own instructions over its parent's). */
export interface ImageConfig {
  env: Record<string, string>
  user?: string
  workdir?: string
  entrypoint?: string[]
  /** True when ENTRYPOINT was written in exec (JSON) form. */
  entrypointExecForm?: boolean
  stopSignal?: string
  expose: string[]
}

export interface ParsedDockerfile {
  args: Record<string, string>
  stages: Stage[]
  stage(name: string): Stage
  config(stage: Stage): ImageConfig
  /** The first stage in a stage's FROM chain that starts from an external image, and that image. */
  rootImage(stage: Stage): string
}

export function parseDockerfile(text: string): ParsedDockerfile {
  const doc = DockerfileParser.parse(text)
  const args: Record<string, string> = {}
  for (const a of doc.getInitialARGs()) {
    const p = a.getProperty()
    if (p) args[p.getName()] = p.getValue() ?? ''
  }
  const expand = (s: string) => s.replace(/\$\{(\w+)\}|\$(\w+)/g, (_, a: string | undefined, b: string | undefined) => args[a ?? b ?? ''] ?? '')
  const stages: Stage[] = []
  let current: Stage | undefined
  for (const ins of doc.getInstructions()) {
    const keyword = ins.getKeyword()
    if (ins instanceof From) {
      const base = expand(ins.getImage() ?? '')
      current = { name: ins.getBuildStage() ?? `#${stages.length}`, base, parent: stages.find((s) => s.name === base), instructions: [], copies: [], runs: [] }
      stages.push(current)
      continue
    }
    if (!current) continue // initial ARGs
    current.instructions.push(ins)
    if (ins instanceof CopyInstruction) {
      const flags = Object.fromEntries(ins.getFlags().map((f) => [f.getName(), f.getValue() ?? '']))
      const parts = ins.getArguments().map((a) => a.getValue())
      current.copies.push({ ...(flags.from ? { from: flags.from } : {}), ...(flags.chown ? { chown: flags.chown } : {}), sources: parts.slice(0, -1), dest: parts.at(-1)! })
    }
    if (keyword === 'RUN') current.runs.push(ins.getArgumentsContent() ?? '')
  }

  const config = (stage: Stage): ImageConfig => {
    const inherited: ImageConfig = stage.parent ? config(stage.parent) : { env: {}, expose: [] }
    const out: ImageConfig = { ...inherited, env: { ...inherited.env }, expose: [...inherited.expose] }
    for (const ins of stage.instructions) {
      const content = ins.getArgumentsContent() ?? ''
      switch (ins.getKeyword()) {
        case 'ENV':
          if (ins instanceof Env) for (const p of ins.getProperties()) out.env[p.getName()] = p.getValue() ?? ''
          break
        case 'USER':
          out.user = content
          break
        case 'WORKDIR':
          out.workdir = content
          break
        case 'STOPSIGNAL':
          out.stopSignal = content
          break
        case 'EXPOSE':
          out.expose.push(...content.split(/\s+/))
          break
        case 'ENTRYPOINT':
          if (!(ins instanceof Entrypoint)) break
          out.entrypointExecForm = content.trim().startsWith('[')
          out.entrypoint = out.entrypointExecForm ? ins.getJSONStrings().map((j) => j.getJSONValue()) : [content]
          break
      }
    }
    return out
  }
  const stage = (name: string) => {
    const s = stages.find((x) => x.name === name)
    if (!s) throw new Error(`${DOCKERFILE} has no stage ${name}`)
    return s
  }
  const rootImage = (s: Stage): string => (s.parent ? rootImage(s.parent) : s.base)
  return { args, stages, stage, config, rootImage }
}

export function readDockerfile(root: string): ParsedDockerfile {
  return parseDockerfile(readFileSync(`${root}/${DOCKERFILE}`, 'utf8'))
}

/**
 * .dockerignore as Docker applies it (moby/patternmatcher): patterns are cleaned paths relative
 * to the context, `*` and `?` stay within one path segment, `**` spans any number, a pattern
 * matching a directory also covers everything under it, `!` re-includes, and the last matching
 * pattern decides.
 */
export function dockerignoreMatcher(text: string): (path: string) => boolean {
  const rules = text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => {
      const negate = l.startsWith('!')
      const pattern = (negate ? l.slice(1) : l).replace(/^\/+/, '').replace(/\/+$/, '')
      return { negate, re: globToRegExp(pattern) }
    })
  return (path: string) => {
    const segments = path.split('/')
    let excluded = false
    for (const { negate, re } of rules) {
      // The path itself or any of its parent directories.
      const hit = segments.some((_, i) => re.test(segments.slice(0, i + 1).join('/')))
      if (hit) excluded = !negate
    }
    return excluded
  }
}

function globToRegExp(pattern: string): RegExp {
  let re = ''
  for (let i = 0; i < pattern.length; i++) {
    const ch = pattern[i]!
    if (ch === '*' && pattern[i + 1] === '*') {
      // "**/" matches zero or more directories; a trailing "**" anything.
      if (pattern[i + 2] === '/') {
        re += '(?:.*/)?'
        i += 2
      } else {
        re += '.*'
        i += 1
      }
    } else if (ch === '*') re += '[^/]*'
    else if (ch === '?') re += '[^/]'
    else if (ch === '[') {
      const end = pattern.indexOf(']', i)
      re += pattern.slice(i, end + 1).replace(/^\[!/, '[^')
      i = end
    } else re += ch.replace(/[.+^${}()|\\]/g, '\\$&')
  }
  return new RegExp(`^${re}$`)
}
