/**
 * Rendering the Kubernetes manifests the way `kubectl apply -k` does (kubectl's built-in
 * Kustomize), for the tests. The commands are exported so that docs/DEPLOY.md can be checked to
 * show only commands the tests actually run (infra/deploy-runbook.test.ts).
 */
import { execFile } from 'node:child_process'
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { parseAllDocuments } from 'yaml'

export const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url))
export const K8S_DIR = 'infra/k8s'
export const BASE_DIR = `${K8S_DIR}/base`
export const OVERLAYS_DIR = `${K8S_DIR}/overlays`

/** Every region's overlay folder name (= its REGION), sorted. */
export const OVERLAYS: readonly string[] = readdirSync(join(REPO_ROOT, OVERLAYS_DIR), { withFileTypes: true })
  .filter((e) => e.isDirectory())
  .map((e) => e.name)
  .sort()

/** A rendered object: only the fields every object has are typed; the rest is read per kind. */
export interface K8sObject {
  apiVersion: string
  kind: string
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> }
  [field: string]: unknown
}

/** The command that renders a kustomization directory, relative to the repository root. */
export function kustomizeCommand(dir: string): string[] {
  return ['kubectl', 'kustomize', dir]
}

/** Renders `dir` (relative to the repository root) with kubectl's Kustomize and parses every document. */
export async function render(dir: string): Promise<K8sObject[]> {
  const [cmd, ...args] = kustomizeCommand(dir)
  const { stdout } = await promisify(execFile)(cmd!, args, { cwd: REPO_ROOT, maxBuffer: 16 << 20 }).catch((e: { stderr?: string; message: string }) => {
    throw new Error(`${kustomizeCommand(dir).join(' ')} failed: ${e.stderr || e.message}`)
  })
  return parseYamlStream(stdout)
}

export function parseYamlStream(text: string): K8sObject[] {
  return parseAllDocuments(text).map((doc) => {
    if (doc.errors.length > 0) throw new Error(`rendered YAML does not parse: ${doc.errors[0]!.message}`)
    return doc.toJS() as K8sObject
  })
}

/**
 * Renders a throwaway kustomization that puts `components` on top of `resources` (both relative
 * to the repository root): how an operator would combine an overlay with, say, the cpu-pool
 * component. Kustomize refuses absolute paths, so the references are relative to a temp folder.
 */
export async function renderComposition(resources: string[], components: string[], extra = ''): Promise<K8sObject[]> {
  const dir = mkdtempSync(join(tmpdir(), 'zl-kustomize-'))
  try {
    const rel = (p: string) => relative(dir, join(REPO_ROOT, p))
    const lines = ['apiVersion: kustomize.config.k8s.io/v1beta1', 'kind: Kustomization', 'resources:', ...resources.map((r) => `  - ${rel(r)}`), 'components:', ...components.map((c) => `  - ${rel(c)}`), extra]
    writeFileSync(join(dir, 'kustomization.yaml'), `${lines.join('\n')}\n`)
    const { stdout } = await promisify(execFile)('kubectl', ['kustomize', dir], { maxBuffer: 16 << 20 })
    return parseYamlStream(stdout)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

/** The one object of `kind` named `name` (a generated ConfigMap's name carries a hash suffix: matched as a prefix). */
export function find(objects: readonly K8sObject[], kind: string, name: string): K8sObject {
  const hits = objects.filter((o) => o.kind === kind && (o.metadata.name === name || (kind === 'ConfigMap' && new RegExp(`^${name}-[a-z0-9]{10}$`).test(o.metadata.name))))
  if (hits.length !== 1) throw new Error(`expected one ${kind} ${name}, found ${hits.length}`)
  return hits[0]!
}
