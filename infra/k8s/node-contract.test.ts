/**
 * The manifests against the node they run (gpu-node/src/config.ts, server routes, shutdown.ts):
 * env names the node reads, the values it parses, the port it listens on, the probe paths and
 * what they answer while draining, the drain time against terminationGracePeriodSeconds, and the
 * tunnel's route to the Service. If the node changes, these fail before a cluster finds out.
 */
import { readFileSync } from 'node:fs'
import { basename, dirname } from 'node:path'
import { parse as parseToml } from 'smol-toml'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parse as parseYaml } from 'yaml'
import { parseNodeConfig, type NodeConfig } from '../../gpu-node/src/config.ts'
import { startTestNode, type TestNode } from '../../gpu-node/test/support/test-node.ts'
import { isPresetName } from '../../gpu-node/tools/generate-model/presets.ts'
import { find, OVERLAYS, OVERLAYS_DIR, render, REPO_ROOT, type K8sObject } from './kustomize.ts'
import { container, containerEnv, podTemplate, portNumber, quantity, type Container, type EnvVar } from './pod-spec.ts'

/** What the kubelet would put where the pod refers to its Secret and its own name. */
const SECRET_VALUES: Record<string, string> = {
  EDGE_SHARED_SECRET: 'zl-test-edge-secret-0123456789',
  UPSTASH_REDIS_REST_URL: 'https://eu1-example.upstash.io',
  UPSTASH_REDIS_REST_TOKEN: 'upstash-token',
}
const POD_NAME = 'zerolayer-gpu-node-7d9f8b6c5d-x2k4q'
function resolveRef(ref: NonNullable<EnvVar['valueFrom']>): string {
  if (ref.fieldRef?.fieldPath === 'metadata.name') return POD_NAME
  if (ref.secretKeyRef) {
    const v = SECRET_VALUES[ref.secretKeyRef.key]
    if (v === undefined) throw new Error(`secret key ${ref.secretKeyRef.key} is not one docs/DEPLOY.md tells operators to create`)
    return v
  }
  throw new Error(`unexpected env reference ${JSON.stringify(ref)}`)
}

/** The launcher's malloc settings (infra/scripts/launch-gpu-node.mjs), read from its source. */
function launcherMalloc(): Record<string, string> {
  const src = readFileSync(`${REPO_ROOT}/infra/scripts/launch-gpu-node.mjs`, 'utf8')
  const out: Record<string, string> = {}
  for (const [, name, value] of src.matchAll(/(MALLOC_[A-Z_]+): '(\d+)'/g)) out[name!] = value!
  return out
}

/**
 * True when the node reads `name`: an invalid value makes parseNodeConfig name it in its error,
 * or a marker value shows up in the parsed config. parseNodeConfig ignores names it does not
 * know, so a misspelt variable in a manifest would otherwise be silently dropped.
 */
function nodeReads(name: string, env: Record<string, string>): boolean {
  const marker = '\u0000zl-probe'
  try {
    const parsed = parseNodeConfig({ ...env, [name]: marker })
    return JSON.stringify(parsed).includes('zl-probe')
  } catch (e) {
    return e instanceof Error && e.message.includes(name)
  }
}

/** Seconds the node may still need after SIGTERM beyond its last request: heartbeat write + HDEL (2 s timeout each), listener and engine close. */
const SHUTDOWN_SLACK_S = 10

/** The longest request the edge lets run, over every wrangler environment (it is also the deadline it sends). */
function edgeRequestTimeoutS(): number {
  const toml = parseToml(readFileSync(`${REPO_ROOT}/wrangler.toml`, 'utf8')) as { vars?: Record<string, string>; env?: Record<string, { vars?: Record<string, string> }> }
  const values = [toml.vars, ...Object.values(toml.env ?? {}).map((e) => e.vars)].map((v) => Number(v?.REQUEST_TIMEOUT_MS ?? 300_000))
  return Math.ceil(Math.max(...values) / 1000)
}

interface Rendered {
  region: string
  objects: K8sObject[]
  node: K8sObject
  c: Container
  env: Record<string, string>
  config: NodeConfig
}

describe('Kubernetes manifests against the GPU node', () => {
  let rendered: Rendered[]
  let testNode: TestNode

  beforeAll(async () => {
    rendered = await Promise.all(
      OVERLAYS.map(async (region) => {
        const objects = await render(`${OVERLAYS_DIR}/${region}`)
        const node = find(objects, 'Deployment', 'zerolayer-gpu-node')
        const c = container(node, 'gpu-node')
        const env = containerEnv(objects, c, resolveRef)
        return { region, objects, node, c, env, config: parseNodeConfig(env) }
      }),
    )
    testNode = await startTestNode({ secret: SECRET_VALUES.EDGE_SHARED_SECRET })
  })
  afterAll(() => testNode?.close())

  it('has one overlay per region, and each parses into a node configuration with that region', () => {
    expect(OVERLAYS.length).toBeGreaterThanOrEqual(3)
    for (const { region, config } of rendered) {
      expect(config.region).toBe(region)
      // Off the default (0, 0): the edge routes by great-circle distance to these.
      expect([config.lat, config.lon]).not.toEqual([0, 0])
      // Heartbeats on, signatures checked: a production node joins the registry and trusts only the edge.
      expect(config.upstash).toBeDefined()
      expect(config.allowUnsigned).toBe(false)
      expect(config.edgeSharedSecret).toBe(SECRET_VALUES.EDGE_SHARED_SECRET)
      expect(config.executionProvider).toBe('cuda')
    }
    // Distinct regions at distinct places.
    expect(new Set(rendered.map((r) => `${r.config.lat},${r.config.lon}`)).size).toBe(rendered.length)
  })

  it('sets only environment variables the node reads (or the launcher sets)', () => {
    const malloc = launcherMalloc()
    expect(Object.keys(malloc).sort()).toEqual(['MALLOC_MMAP_MAX_', 'MALLOC_TRIM_THRESHOLD_'])
    for (const { env } of rendered) {
      for (const name of Object.keys(env)) {
        if (name in malloc) continue
        expect(nodeReads(name, env), `${name} is set in the manifests but gpu-node/src/config.ts does not read it`).toBe(true)
      }
      // glibc reads these only at process start; the pod sets what the launcher sets.
      for (const [name, value] of Object.entries(malloc)) expect(env[name], name).toBe(value)
    }
  })

  it('gives every pod its own registry id and the region URL the tunnel serves', () => {
    for (const { objects, node, c, config } of rendered) {
      // One row per pod: the Deployment's pods share everything but their name.
      expect(c.env?.find((v) => v.name === 'NODE_ID')?.valueFrom?.fieldRef?.fieldPath).toBe('metadata.name')
      expect(config.nodeId).toBe(POD_NAME)
      // Every pod advertises the region's public hostname; the tunnel's ingress rule for that
      // hostname leads to the node Service, whose port leads to the container port the node binds.
      const url = new URL(config.publicUrl!)
      expect(url.protocol).toBe('https:')
      const tunnel = parseYaml(String((find(objects, 'ConfigMap', 'cloudflared').data as Record<string, string>)['config.yaml'])) as {
        ingress: Array<{ hostname?: string; service: string }>
        metrics: string
        'credentials-file': string
      }
      const rule = tunnel.ingress.find((r) => r.hostname === url.host)
      expect(rule, `no ingress rule for ${url.host}`).toBeDefined()
      expect(tunnel.ingress.at(-1)).toEqual({ service: 'http_status:404' })
      const target = new URL(rule!.service)
      const svc = find(objects, 'Service', 'zerolayer-gpu-node')
      expect(target.protocol).toBe('http:') // the node serves HTTP/1.1 on a plaintext port (no TLS_CERT here)
      expect(config.tls).toBeUndefined()
      expect(target.hostname).toBe(`${svc.metadata.name}.${svc.metadata.namespace}.svc.cluster.local`)
      const svcPort = (svc.spec as { ports: Array<{ port: number; targetPort: string | number }> }).ports.find((p) => p.port === Number(target.port))
      expect(svcPort, `Service has no port ${target.port}`).toBeDefined()
      expect(portNumber(c, svcPort!.targetPort)).toBe(config.port)
      expect((svc.spec as { selector: Record<string, string> }).selector).toEqual(expect.objectContaining({ 'app.kubernetes.io/name': podTemplate(node).metadata.labels['app.kubernetes.io/name'] }))

      // cloudflared: config and credentials where it reads them, liveness on its metrics port.
      const cf = find(objects, 'Deployment', 'cloudflared')
      const cfc = container(cf, 'cloudflared')
      const mount = (name: string) => cfc.volumeMounts!.find((m) => m.name === name)!.mountPath
      expect(cfc.args!.slice(cfc.args!.indexOf('--config'), cfc.args!.indexOf('--config') + 2)).toEqual(['--config', `${mount('config')}/config.yaml`])
      expect(tunnel['credentials-file'].startsWith(`${mount('creds')}/`)).toBe(true)
      expect(portNumber(cfc, cfc.livenessProbe!.httpGet!.port)).toBe(Number(tunnel.metrics.split(':').at(-1)))
    }
  })

  it('listens on all interfaces at the port the pod declares, with the model on the read-only volume', () => {
    for (const { c, config, node } of rendered) {
      expect(config.host).toBe('0.0.0.0') // kubelet probes and the Service reach the pod IP, not loopback
      expect(c.ports!.map((p) => p.containerPort)).toEqual([config.port])
      const model = c.volumeMounts!.find((m) => m.mountPath === dirname(config.modelDir))
      expect(model, `no volume mounted at MODEL_DIR's parent (${config.modelDir})`).toBeDefined()
      expect(model!.readOnly).toBe(true)
      // The directory's name is the model id the node serves and advertises (model-dir.ts), and
      // must not be a generated preset's: the node would try to (re)generate it on the read-only volume.
      expect(isPresetName(basename(config.modelDir)), config.modelDir).toBe(false)
      expect(podTemplate(node).metadata.annotations?.['prometheus.io/port']).toBe(String(config.port))
    }
  })

  it('probes paths the node serves, with the answers the pod lifecycle needs', async () => {
    for (const { c, node } of rendered) {
      const path = (p: keyof Pick<Container, 'startupProbe' | 'readinessProbe' | 'livenessProbe'>) => c[p]!.httpGet!.path
      for (const p of ['startupProbe', 'readinessProbe', 'livenessProbe'] as const) expect(portNumber(c, c[p]!.httpGet!.port)).toBe(c.ports![0]!.containerPort)
      const metricsPath = podTemplate(node).metadata.annotations!['prometheus.io/path']!
      const status = async (p: string) => (await fetch(`${testNode.url}${p}`)).status

      testNode.state.draining = false
      expect(await status(path('startupProbe'))).toBe(200)
      expect(await status(path('readinessProbe'))).toBe(200)
      expect(await status(path('livenessProbe'))).toBe(200)
      const metrics = await (await fetch(`${testNode.url}${metricsPath}`)).text()
      expect(metrics).toMatch(/^# TYPE zl_num_requests_waiting gauge$/m)

      // Draining: out of the Service (readiness fails) but never restarted (liveness holds).
      testNode.state.draining = true
      try {
        expect(await status(path('readinessProbe'))).toBe(503)
        expect(await status(path('livenessProbe'))).toBe(200)
      } finally {
        testNode.state.draining = false
      }
    }
  })

  it('gives a draining pod, and the tunnel connector its streams pass through, time to finish every request the edge lets run', () => {
    const requestS = edgeRequestTimeoutS()
    for (const { node, config, objects } of rendered) {
      // shutdown.ts waits for every admitted request (engine.drain), then stops the heartbeat and
      // closes: the longest request plus DRAIN_GRACE_MS (as parsed here) plus that slack.
      const drainS = requestS + Math.ceil(config.drainGraceMs / 1000) + SHUTDOWN_SLACK_S
      const grace = podTemplate(node).spec.terminationGracePeriodSeconds!
      expect(grace, `terminationGracePeriodSeconds ${grace} < drain time ${drainS}`).toBeGreaterThanOrEqual(drainS)

      const cf = find(objects, 'Deployment', 'cloudflared')
      const args = container(cf, 'cloudflared').args!
      const cfGrace = Number(/^(\d+)s$/.exec(args[args.indexOf('--grace-period') + 1]!)![1])
      expect(cfGrace).toBeGreaterThanOrEqual(drainS)
      expect(podTemplate(cf).spec.terminationGracePeriodSeconds!).toBeGreaterThan(cfGrace)
    }
  })

  it('rolls without dropping capacity and drains one pod at a time', () => {
    for (const { objects, node } of rendered) {
      const strategy = (node.spec as { strategy: { type: string; rollingUpdate: { maxSurge: number; maxUnavailable: number } } }).strategy
      expect(strategy).toEqual({ type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } })
      const pdb = find(objects, 'PodDisruptionBudget', 'zerolayer-gpu-node').spec as { maxUnavailable: number; selector: { matchLabels: Record<string, string> } }
      expect(pdb.maxUnavailable).toBe(1)
      expect(podTemplate(node).metadata.labels).toEqual(expect.objectContaining(pdb.selector.matchLabels))
      // The HPA owns the replica count.
      expect((node.spec as Record<string, unknown>).replicas).toBeUndefined()
    }
  })

  it('asks for memory beyond the KV and prefix-cache budgets, and for a GPU', () => {
    for (const { c, config } of rendered) {
      const limit = quantity(c.resources!.limits!.memory!)
      expect(quantity(c.resources!.requests!.memory!)).toBe(limit)
      // The runner's caches live in host memory (docs/GPU.md); the model and runtime need room beside them.
      expect(limit).toBeGreaterThan(config.limits.kvBudgetBytes + (config.limits.prefixCacheBytes ?? 0) + 8 * 2 ** 30)
      expect(quantity(c.resources!.limits!['nvidia.com/gpu']!)).toBe(1)
    }
  })
})
