/**
 * Validation of rendered objects against the Kubernetes API, offline, in two layers:
 *
 * 1. kubernetes-models' validators (generated from the Kubernetes OpenAPI schema): required
 *    fields, types, formats, enums. A kind it has no model for is an error: a custom resource
 *    cannot slip through unvalidated.
 * 2. Unknown fields. The OpenAPI schema does not forbid extra properties, so (1) accepts a
 *    misspelt `readinesProbe` that `kubectl apply` (strict field validation, its default) would
 *    refuse, or that an older server would silently drop. The same package's TypeScript
 *    interfaces are exact, so each object is type-checked as an object literal against its
 *    interface: TypeScript reports every property the interface does not declare.
 */
import { createRequire } from 'node:module'
import { join } from 'node:path'
import ts from 'typescript'
import type { K8sObject } from './kustomize.ts'
import { REPO_ROOT } from './kustomize.ts'

const require = createRequire(import.meta.url)

/** kubernetes-models' module path for an apiVersion and kind ("v1" is the core group). */
function modelPath(apiVersion: string, kind: string): string {
  return `kubernetes-models/${apiVersion}/${kind}`
}

type ModelClass = new (data: unknown) => { validate(): void }

/** Layer 1: the schema errors of one object, or [] when it is valid. */
export function schemaErrors(obj: K8sObject): string[] {
  const where = `${obj.kind}/${obj.metadata?.name}`
  let Model: ModelClass | undefined
  try {
    Model = (require(modelPath(obj.apiVersion, obj.kind)) as Record<string, ModelClass>)[obj.kind]
  } catch {
    Model = undefined
  }
  if (!Model) return [`${where}: no Kubernetes API schema for ${obj.apiVersion} ${obj.kind}`]
  try {
    new Model(obj).validate()
    return []
  } catch (e) {
    return [`${where}: ${e instanceof Error ? e.message : String(e)}`]
  }
}

/** Layer 2: every property of every object that its kind's API type does not declare. */
export function unknownFieldErrors(objects: readonly K8sObject[]): string[] {
  // A virtual file inside the repository, so that `kubernetes-models` resolves from node_modules.
  const file = join(REPO_ROOT, 'infra/k8s/__rendered_objects__.ts')
  const owners: Array<{ fromLine: number; where: string }> = []
  const lines: string[] = []
  objects.forEach((obj, i) => lines.push(`import type { I${obj.kind} as K${i} } from '${modelPath(obj.apiVersion, obj.kind)}'`))
  let lineCount = lines.length
  objects.forEach((obj, i) => {
    const literal = `export const o${i} = ${JSON.stringify(obj, null, 1)} satisfies K${i}`
    owners.push({ fromLine: lineCount, where: `${obj.kind}/${obj.metadata.name}` })
    lines.push(literal)
    lineCount += literal.split('\n').length
  })
  const text = lines.join('\n')
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: [],
    lib: ['lib.es2022.d.ts'],
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
  }
  const host = ts.createCompilerHost(options)
  const getSourceFile = host.getSourceFile.bind(host)
  host.getSourceFile = (name, lang, ...rest) => (name === file ? ts.createSourceFile(name, text, lang) : getSourceFile(name, lang, ...rest))
  const fileExists = host.fileExists.bind(host)
  host.fileExists = (name) => name === file || fileExists(name)
  const program = ts.createProgram([file], options, host)
  const objectAt = (line: number) => [...owners].reverse().find((o) => o.fromLine <= line)
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const message = ts.flattenDiagnosticMessageText(d.messageText, ' ')
    if (d.file?.fileName !== file || d.start === undefined) return message
    const { line } = d.file.getLineAndCharacterOfPosition(d.start)
    const owner = line < owners[0]!.fromLine ? undefined : objectAt(line)
    return `${owner?.where ?? 'import'}: ${message}`
  })
}
