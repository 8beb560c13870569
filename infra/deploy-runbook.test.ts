/**
 * docs/DEPLOY.md's commands: every `sh` block either starts with "# not runnable here" (it needs
 * a cluster, a Cloudflare account, Docker or Helm) or holds only commands the tests run, built
 * from the same functions the tests use. The not-runnable ones are still checked where they name
 * the repository: the paths, Dockerfile targets, kustomization folders and Secret keys they use
 * must be the ones that exist.
 */
import { existsSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { beforeAll, describe, expect, it } from 'vitest'
import { parse as parseYaml } from 'yaml'
import { readDockerfile } from './docker/dockerfile.ts'
import { find, kustomizeCommand, OVERLAYS, OVERLAYS_DIR, render, REPO_ROOT, type K8sObject } from './k8s/kustomize.ts'
import { container } from './k8s/pod-spec.ts'
import { dryRunCommand, WRANGLER_ENVS } from './workers/edge-bundle.ts'

const RUNBOOK = 'docs/DEPLOY.md'
const NOT_RUNNABLE = /^# not runnable here: \S/

/** What the tests run: the overlay renders (k8s/*.test.ts), the dry-run deploys (workers/edge-bundle.test.ts), and the test run itself. */
const TESTED_COMMANDS = new Set([
  ...OVERLAYS.map((r) => kustomizeCommand(`${OVERLAYS_DIR}/${r}`).join(' ')),
  ...WRANGLER_ENVS.map((e) => dryRunCommand(e).join(' ')),
  'npx vitest run --project node infra',
  'npm test',
])

interface Block {
  line: number
  lines: string[]
}

/** The fenced sh blocks (also indented ones, inside list items), with their continuation lines joined. */
function shellBlocks(md: string): Block[] {
  const out: Block[] = []
  const lines = md.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```sh\s*$/.exec(lines[i]!)
    if (!open) continue
    const body: string[] = []
    let j = i + 1
    for (; j < lines.length && !/^\s*```\s*$/.test(lines[j]!); j++) body.push(lines[j]!.slice(open[1]!.length))
    out.push({ line: i + 1, lines: body.join('\n').replace(/\\\n\s*/g, '').split('\n').filter((l) => l.trim() !== '') })
    i = j
  }
  return out
}

/** The command part of a line: without a trailing `# comment`. */
const command = (l: string) => l.replace(/\s+#\s.*$/, '').trim()

describe(`${RUNBOOK} commands`, () => {
  const blocks = shellBlocks(readFileSync(join(REPO_ROOT, RUNBOOK), 'utf8'))
  const commands = blocks.flatMap((b) => b.lines.filter((l) => !l.startsWith('#')).map(command))
  let objects: K8sObject[]

  beforeAll(async () => {
    objects = await render(`${OVERLAYS_DIR}/${OVERLAYS[0]}`)
  })

  it('are either run by a test or marked as not runnable here', () => {
    expect(blocks.length).toBeGreaterThan(5)
    const runnable = blocks.filter((b) => !NOT_RUNNABLE.test(b.lines[0]!))
    expect(runnable.length).toBeGreaterThan(0)
    for (const b of runnable) {
      for (const l of b.lines) expect(TESTED_COMMANDS, `${RUNBOOK}:${b.line}: "${l}" is neither run by a test nor in a block marked "# not runnable here: why"`).toContain(command(l))
    }
    // The marker is the first line only: one further down would not be seen by a reader skimming.
    for (const b of blocks) for (const l of b.lines.slice(1)) expect(l, `${RUNBOOK}:${b.line}`).not.toMatch(/not runnable here/)
  })

  it('name repository paths that exist, Dockerfile targets it has and folders kustomize can apply', () => {
    const df = readDockerfile(REPO_ROOT)
    const paths = commands.flatMap((c) => [...c.matchAll(/(?:^|[\s=])((?:infra|docs|edge|gpu-node|shared)\/[\w./-]+)/g)].map((m) => m[1]!))
    expect(paths.length).toBeGreaterThan(5)
    for (const p of paths) expect(existsSync(join(REPO_ROOT, p)), `${p} (named in ${RUNBOOK})`).toBe(true)
    for (const c of commands.filter((x) => x.startsWith('docker build'))) {
      expect(c, 'docker build names its target: the last stage is not the only one').toMatch(/--target \S+/)
      const target = /--target (\S+)/.exec(c)![1]!
      expect(df.stages.map((s) => s.name)).toContain(target)
      expect(/-f (\S+)/.exec(c)?.[1]).toBe('infra/docker/gpu-node.Dockerfile')
      if (target === 'gpu-baked') expect(c).toMatch(/--build-context model=\S+ .*--build-arg MODEL_ID=\S+/)
    }
    for (const c of commands.filter((x) => /^kubectl (apply|kustomize)/.test(x))) {
      const dir = /(?:-k|kustomize) (\S+)/.exec(c)![1]!
      expect(statSync(join(REPO_ROOT, dir, 'kustomization.yaml')).isFile(), c).toBe(true)
    }
  })

  it('create the Secrets the manifests read, with exactly the keys they read', () => {
    const node = find(objects, 'Deployment', 'zerolayer-gpu-node')
    const wanted = (container(node, 'gpu-node').env ?? []).flatMap((e) => (e.valueFrom?.secretKeyRef ? [`${e.valueFrom.secretKeyRef.name}:${e.valueFrom.secretKeyRef.key}`] : []))
    const created = commands
      .filter((c) => c.startsWith('kubectl -n zerolayer create secret generic'))
      .flatMap((c) => {
        const name = /create secret generic (\S+)/.exec(c)![1]!
        return [...c.matchAll(/--from-(?:literal|file)=([\w.]+)=/g)].map((m) => `${name}:${m[1]}`)
      })
    expect(created.filter((s) => s.startsWith('zerolayer-gpu-node:')).sort()).toEqual(wanted.sort())
    // cloudflared reads its credentials file from the Secret its Deployment mounts, under the name its config gives.
    const cf = find(objects, 'Deployment', 'cloudflared')
    const secretVolume = (cf.spec as { template: { spec: { volumes: Array<{ name: string; secret?: { secretName: string } }> } } }).template.spec.volumes.find((v) => v.secret)!
    const config = parseYaml(String((find(objects, 'ConfigMap', 'cloudflared').data as Record<string, string>)['config.yaml'])) as { 'credentials-file': string }
    expect(created).toContain(`${secretVolume.secret!.secretName}:${config['credentials-file'].split('/').at(-1)}`)
  })
})
