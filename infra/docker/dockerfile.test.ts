/**
 * The GPU node image, checked without a Docker engine (none runs where these tests run, so the
 * image has not been built here). Two halves:
 * - lint: the rules this image must keep (pinned bases, the CUDA flavour the provider links,
 *   Node 20, production dependencies only with onnxruntime-node's download skipped, the CUDA
 *   provider installed by the project's script, non-root, SIGTERM to node as PID 1, the
 *   launcher's malloc settings, the build context let through by .dockerignore);
 * - run: the cpu stage's /app assembled from its COPY instructions, started with its own
 *   ENTRYPOINT, WORKDIR and ENV, answers its probes and drains on SIGTERM.
 */
import { spawn } from 'node:child_process'
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, dirname, join, relative } from 'node:path'
import { createInterface } from 'node:readline'
import { afterAll, describe, expect, it } from 'vitest'
import { REPO_ROOT } from '../k8s/kustomize.ts'
import { DOCKERFILE, dockerignoreMatcher, readDockerfile, type Stage } from './dockerfile.ts'
import { runtimeGraph } from './runtime-imports.ts'

const df = readDockerfile(REPO_ROOT)
const ignored = dockerignoreMatcher(readFileSync(`${REPO_ROOT}/.dockerignore`, 'utf8'))
const pkg = JSON.parse(readFileSync(`${REPO_ROOT}/package.json`, 'utf8')) as { dependencies: Record<string, string>; devDependencies: Record<string, string> }
const lock = JSON.parse(readFileSync(`${REPO_ROOT}/package-lock.json`, 'utf8')) as { packages: Record<string, { version: string }> }
const installScript = readFileSync(`${REPO_ROOT}/infra/scripts/install-cuda-provider.sh`, 'utf8')

/** The stages an orchestrator runs, and the execution provider each is for. */
const RUNTIME_STAGES = { gpu: 'cuda', 'gpu-baked': 'cuda', cpu: 'cpu' } as const
/**
 * The CUDA major the provider binaries need: libonnxruntime_providers_cuda.so from
 * com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9 lists libcublas.so.13, libcublasLt.so.13 and
 * libcudart.so.13 as NEEDED (readelf -d, checked when this image was written; shared/FACTS.md).
 */
const PROVIDER_CUDA_MAJOR = 13

/** Every file under `path` (a file or a directory, relative to the repository root). */
function filesUnder(path: string): string[] {
  const abs = join(REPO_ROOT, path)
  if (!statSync(abs).isDirectory()) return [path]
  return readdirSync(abs, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => relative(REPO_ROOT, join(e.parentPath, e.name)))
}

/** The context files a stage's own COPY instructions take (after .dockerignore). */
function contextFiles(stage: Stage): Array<{ src: string; dest: string }> {
  return stage.copies
    .filter((c) => !c.from)
    .flatMap((c) =>
      c.sources.flatMap((src) => {
        const isDir = statSync(join(REPO_ROOT, src)).isDirectory()
        return filesUnder(src)
          .filter((f) => !ignored(f))
          .map((f) => ({ src: f, dest: c.dest.endsWith('/') && !isDir ? join(c.dest, basename(f)) : isDir ? join(c.dest, relative(src, f)) : c.dest }))
      }),
    )
}

/** The stages in a stage's FROM chain, itself last. */
function chain(stage: Stage): Stage[] {
  return stage.parent ? [...chain(stage.parent), stage] : [stage]
}

describe(`${DOCKERFILE}: lint`, () => {
  it('pins every base image to a version tag', () => {
    for (const s of df.stages.filter((x) => !x.parent)) {
      expect(s.base, s.name).toMatch(/^[\w./-]+:[\w.-]+$/)
      expect(s.base.endsWith(':latest'), s.name).toBe(false)
      expect(s.base, `${s.name}: a tag with a version number`).toMatch(/:\d+\.\d+/)
    }
  })

  it('runs Node 20 (the tested runtime) and, on GPU, the CUDA major the provider links', () => {
    const node = /^node:(\d+)\.(\d+)\.\d+-/.exec(df.args.NODE_IMAGE!)
    expect(node, df.args.NODE_IMAGE).not.toBeNull()
    expect(Number(node![1])).toBe(20)
    // package.json engines: ">=20.11 <21 || >=22"
    expect(Number(node![2])).toBeGreaterThanOrEqual(11)
    expect(df.rootImage(df.stage('gpu'))).toBe(df.args.CUDA_IMAGE)
    const cuda = /^nvidia\/cuda:(\d+)\.\d+\.\d+-(?:cudnn-)?runtime-ubuntu\d+\.\d+$/.exec(df.args.CUDA_IMAGE!)
    expect(cuda, `${df.args.CUDA_IMAGE}: an official NVIDIA CUDA runtime image`).not.toBeNull()
    expect(Number(cuda![1])).toBe(PROVIDER_CUDA_MAJOR)
    expect(df.rootImage(df.stage('cpu'))).toBe(df.args.NODE_IMAGE)
  })

  it('installs production dependencies with npm ci, skipping onnxruntime-node\'s download, and every package the node loads is one', () => {
    const deps = df.stage('deps')
    const ci = deps.runs.findIndex((r) => /\bnpm ci\b/.test(r))
    expect(deps.runs[ci]).toMatch(/npm ci --omit=dev\b/)
    // .npmrc is in the image before npm ci runs, and it carries the skip.
    expect(deps.copies.some((c) => c.sources.includes('.npmrc') && c.sources.includes('package-lock.json'))).toBe(true)
    expect(deps.instructions.findIndex((i) => i.getKeyword() === 'COPY')).toBeLessThan(deps.instructions.findIndex((i) => i.getKeyword() === 'RUN'))
    expect(readFileSync(`${REPO_ROOT}/.npmrc`, 'utf8')).toMatch(/^onnxruntime-node-install=skip$/m)

    const graph = runtimeGraph(REPO_ROOT, ['gpu-node/src/main.ts'])
    // The model runner's worker thread is reached (through its module URL), tsx with it.
    expect(graph.files).toContain('gpu-node/src/model/runner-worker.ts')
    for (const p of graph.packages) expect(Object.keys(pkg.dependencies), `${p} is loaded at run time but is not in package.json dependencies`).toContain(p)
    // ENTRYPOINT's --import tsx: a runtime dependency too.
    expect(Object.keys(pkg.dependencies)).toContain('tsx')
  })

  it('installs the CUDA provider with the project\'s script, into the onnxruntime-node it was built for', () => {
    const provider = df.stage('cuda-provider')
    expect(provider.parent?.name).toBe('deps')
    expect(provider.runs).toEqual(['infra/scripts/install-cuda-provider.sh'])
    // The script refuses any other onnxruntime-node: the lockfile must pin the one it names.
    const wanted = /\[ "\$ORT_VERSION" = ([\d.]+) \]/.exec(installScript)![1]
    expect(lock.packages['node_modules/onnxruntime-node']!.version).toBe(wanted)
    expect(pkg.dependencies['onnxruntime-node']).toBe(wanted)
    // The GPU image takes node_modules from that stage; the CPU image from plain deps.
    expect(df.stage('gpu-runtime').copies.find((c) => c.dest === './node_modules')?.from).toBe('cuda-provider')
    expect(df.stage('cpu').copies.find((c) => c.dest === './node_modules')?.from).toBe('deps')
  })

  it('runs node as PID 1 as a non-root user, drains on SIGTERM, with the launcher\'s malloc settings', () => {
    const launcher = readFileSync(`${REPO_ROOT}/infra/scripts/launch-gpu-node.mjs`, 'utf8')
    const malloc = Object.fromEntries([...launcher.matchAll(/(MALLOC_[A-Z_]+): '(\d+)'/g)].map((m) => [m[1]!, m[2]!]))
    expect(Object.keys(malloc)).toHaveLength(2)
    for (const [name, provider] of Object.entries(RUNTIME_STAGES)) {
      const c = df.config(df.stage(name))
      expect(c.entrypointExecForm, `${name}: exec-form ENTRYPOINT, so no shell stands between the signal and node`).toBe(true)
      expect(c.entrypoint).toEqual(['node', '--import', 'tsx', 'gpu-node/src/main.ts'])
      expect(c.stopSignal).toBe('SIGTERM')
      expect(c.user, name).toMatch(/^[1-9]\d*:[1-9]\d*$/) // numeric: runAsNonRoot can verify it
      expect(c.workdir).toBe('/app')
      for (const [k, v] of Object.entries(malloc)) expect(c.env[k], `${name} ${k}`).toBe(v)
      expect(c.env.EXECUTION_PROVIDER).toBe(provider)
      expect(c.env.HOST).toBe('0.0.0.0')
      expect(c.expose).toEqual([c.env.PORT])
      // Models live in /models/<id>, a folder of the image's user; the tiny demo model the default
      // MODEL_DIR names is generated there when the image is built (the node never generates).
      expect(dirname(c.env.MODEL_DIR!)).toBe('/models')
      const [uid, gid] = c.user!.split(':')
      // Each command of every RUN, line continuations joined.
      const runs = chain(df.stage(name)).flatMap((s) => s.runs.flatMap((r) => r.replace(/\\\r?\n/g, ' ').split('&&').map((c) => c.trim().replace(/\s+/g, ' '))))
      expect(runs).toContain(`install -d -o ${uid} -g ${gid} /models`)
      expect(runs).toContain('node --import tsx gpu-node/tools/generate-model/cli.ts --preset tiny --out /models/tiny')
    }
    expect(df.config(df.stage('gpu')).env.MODEL_DIR).toBe('/models/tiny')
    expect(df.config(df.stage('cpu')).env.MODEL_DIR).toBe('/models/tiny')
    // Baked: the model at /models/<MODEL_ID>, and MODEL_DIR pointing at it.
    const baked = df.stage('gpu-baked')
    expect(baked.copies.map((c) => [c.from, c.dest])).toEqual([['model', '/models/${MODEL_ID}']])
    expect(df.config(baked).env.MODEL_DIR).toBe('/models/${MODEL_ID}')
    // A build without --target makes the GPU image.
    expect(df.stages.at(-1)!.name).toBe('gpu')
  })

  it('keeps to the usual Dockerfile rules: no ADD, no sudo, setup RUNs before USER', () => {
    for (const s of df.stages) {
      for (const ins of s.instructions) expect(ins.getKeyword(), `${s.name}: use COPY (hadolint DL3020)`).not.toBe('ADD')
      for (const r of s.runs) {
        expect(r).not.toMatch(/\bsudo\b/)
        if (/apt-get install/.test(r)) expect(r).toMatch(/--no-install-recommends/)
      }
    }
    for (const name of Object.keys(RUNTIME_STAGES)) {
      for (const s of chain(df.stage(name))) {
        const keywords = s.instructions.map((i) => i.getKeyword())
        const user = keywords.lastIndexOf('USER')
        if (user >= 0) expect(keywords.slice(user).includes('RUN'), `${s.name}: RUN after USER`).toBe(false)
      }
    }
  })

  it('lets every COPY source through .dockerignore, and nothing large or secret', () => {
    for (const s of df.stages) {
      for (const c of s.copies.filter((x) => !x.from)) {
        for (const src of c.sources) {
          expect(existsSync(join(REPO_ROOT, src)), `${s.name}: COPY ${src} does not exist`).toBe(true)
          expect(filesUnder(src).filter((f) => !ignored(f) && !f.endsWith('.test.ts')).length, `${s.name}: COPY ${src} is excluded by .dockerignore`).toBeGreaterThan(0)
        }
      }
    }
    for (const path of ['node_modules/zod/package.json', 'models/tiny/model.onnx', '.dev.vars', '.dev.vars.staging', '.stack/logs/edge.log', '.wrangler/state/x', '.git/HEAD', 'test/e2e/stack.test.ts', 'edge/src/app.ts', 'gpu-node/src/config.test.ts', 'gpu-node/test/support/test-node.ts']) {
      expect(ignored(path), path).toBe(true)
    }
    for (const path of ['package.json', 'package-lock.json', '.npmrc', 'gpu-node/src/main.ts', 'shared/src/signature.ts', 'infra/scripts/install-cuda-provider.sh']) expect(ignored(path), path).toBe(false)
  })

  it('copies every file the node loads to the same place under WORKDIR (its imports are relative)', () => {
    for (const name of Object.keys(RUNTIME_STAGES)) {
      const workdir = df.config(df.stage(name)).workdir!
      const placed = new Map(chain(df.stage(name)).flatMap((s) => contextFiles(s).map((f) => [f.src, join(workdir, f.dest)] as const)))
      const misplaced = runtimeGraph(REPO_ROOT, ['gpu-node/src/main.ts']).files.filter((f) => placed.get(f) !== join(workdir, f))
      expect(misplaced, name).toEqual([])
    }
  })
})

describe(`${DOCKERFILE}: the cpu stage runs`, () => {
  const dirs: string[] = []
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true })
  })

  it('starts from its ENTRYPOINT in WORKDIR with its ENV and the files its COPY instructions take, serves its probes, and drains on SIGTERM', async () => {
    const stage = df.stage('cpu')
    const image = df.config(stage)
    const root = mkdtempSync(join(tmpdir(), 'zl-image-'))
    dirs.push(root)
    const app = join(root, image.workdir!)
    for (const { src, dest } of contextFiles(stage)) {
      const to = join(app, dest)
      mkdirSync(dirname(to), { recursive: true })
      cpSync(join(REPO_ROOT, src), to)
    }
    // node_modules: the deps stage's, stood in for by the repository's (its production subset is checked above).
    symlinkSync(join(REPO_ROOT, 'node_modules'), join(app, 'node_modules'))
    // The model at MODEL_DIR (under the temp root), as a volume would put it there.
    const modelDir = join(root, image.env.MODEL_DIR!)
    mkdirSync(dirname(modelDir), { recursive: true })
    symlinkSync(join(REPO_ROOT, 'models', basename(modelDir)), modelDir)

    const [cmd, ...args] = image.entrypoint!
    expect(cmd).toBe('node')
    // Port 0 and loopback only so the test cannot collide with anything; no registry, no secret.
    const env = { PATH: process.env.PATH ?? '', ...image.env, MODEL_DIR: modelDir, PORT: '0', HOST: '127.0.0.1', ALLOW_UNSIGNED: '1' }
    const child = spawn(process.execPath, args, { cwd: app, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let stderr = ''
    child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()))
    const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
    const lines: Array<Record<string, unknown>> = []
    const waiters: Array<[(l: Record<string, unknown>) => boolean, (l: Record<string, unknown>) => void]> = []
    createInterface({ input: child.stdout! }).on('line', (text) => {
      try {
        const l = JSON.parse(text) as Record<string, unknown>
        lines.push(l)
        for (const w of [...waiters]) if (w[0](l)) (waiters.splice(waiters.indexOf(w), 1), w[1](l))
      } catch {
        // not a log line
      }
    })
    const line = (pred: (l: Record<string, unknown>) => boolean) =>
      Promise.race([
        new Promise<Record<string, unknown>>((resolve) => (lines.find(pred) ? resolve(lines.find(pred)!) : waiters.push([pred, resolve]))),
        exit.then((code) => Promise.reject(new Error(`node exited with ${code}: ${stderr}`))),
      ])
    try {
      const ready = await line((l) => l.msg === 'ready')
      // The model id is MODEL_DIR's last segment; the current tiny model was used as it was.
      expect(ready).toMatchObject({ region: 'local', model: basename(modelDir) })
      expect(lines.some((l) => String(l.msg).includes('generating'))).toBe(false)
      for (const path of ['/healthz', '/readyz']) expect((await fetch(`${String(ready.url)}${path}`)).status, path).toBe(200)
      expect(await (await fetch(`${String(ready.url)}/metrics`)).text()).toContain('zl_num_requests_waiting')
      const environ = readFileSync(`/proc/${String(ready.pid)}/environ`, 'utf8').split('\0')
      expect(environ).toContain('MALLOC_MMAP_MAX_=0')
      expect(environ).toContain(`EXECUTION_PROVIDER=${RUNTIME_STAGES.cpu}`)
      child.kill(image.stopSignal as NodeJS.Signals)
      await line((l) => l.msg === 'drained')
      expect(await exit).toBe(0)
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL')
    }
  })
})
