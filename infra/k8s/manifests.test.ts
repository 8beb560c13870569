/**
 * Every overlay renders with kubectl's Kustomize, and every rendered object is a valid
 * Kubernetes API object (api-schema.ts: the OpenAPI schema, and no field the API type lacks),
 * lands in the zerolayer namespace, refers only to objects that exist (or to the two Secrets
 * docs/DEPLOY.md has operators create), and runs under the restricted Pod Security Standard.
 */
import { beforeAll, describe, expect, it } from 'vitest'
import { schemaErrors, unknownFieldErrors } from './api-schema.ts'
import { find, OVERLAYS, OVERLAYS_DIR, render, renderComposition, type K8sObject } from './kustomize.ts'
import { container, podTemplate, type PodSpec } from './pod-spec.ts'

/** Created by the operator, never committed (docs/DEPLOY.md, "Secrets"). */
const OPERATOR_SECRETS = new Set(['zerolayer-gpu-node', 'cloudflared-credentials'])
const CLUSTER_SCOPED = new Set(['Namespace'])

const EXPECTED_KINDS = [
  'ConfigMap/cloudflared',
  'ConfigMap/zerolayer-gpu-node',
  'Deployment/cloudflared',
  'Deployment/zerolayer-gpu-node',
  'HorizontalPodAutoscaler/zerolayer-gpu-node',
  'Namespace/zerolayer',
  'NetworkPolicy/cloudflared',
  'NetworkPolicy/zerolayer-gpu-node',
  'NetworkPolicy/zerolayer-gpu-node-from-cloudflared',
  'PersistentVolumeClaim/zerolayer-model',
  'PodDisruptionBudget/cloudflared',
  'PodDisruptionBudget/zerolayer-gpu-node',
  'Service/zerolayer-gpu-node',
  'ServiceAccount/cloudflared',
  'ServiceAccount/zerolayer-gpu-node',
]

const CPU_POOL = 'infra/k8s/components/cpu-pool'

/** A generated ConfigMap's name without its content hash. */
const baseName = (o: K8sObject) => (o.kind === 'ConfigMap' ? o.metadata.name.replace(/-[a-z0-9]{10}$/, '') : o.metadata.name)

function deployments(objects: readonly K8sObject[]): K8sObject[] {
  return objects.filter((o) => o.kind === 'Deployment')
}

/** The restricted Pod Security Standard's rules (kubernetes.io/docs/concepts/security/pod-security-standards), checked per pod. */
function restrictedViolations(name: string, spec: PodSpec): string[] {
  const out: string[] = []
  const podSc = (spec.securityContext ?? {}) as { runAsNonRoot?: boolean; runAsUser?: number; seccompProfile?: { type: string } }
  const allowedVolumes = new Set(['configMap', 'csi', 'downwardAPI', 'emptyDir', 'ephemeral', 'persistentVolumeClaim', 'projected', 'secret'])
  for (const v of spec.volumes ?? []) {
    for (const source of Object.keys(v).filter((k) => k !== 'name')) if (!allowedVolumes.has(source)) out.push(`${name}: volume ${v.name} uses ${source}`)
  }
  for (const c of [...spec.containers, ...(spec.initContainers ?? [])]) {
    const sc = (c.securityContext ?? {}) as { allowPrivilegeEscalation?: boolean; privileged?: boolean; runAsNonRoot?: boolean; runAsUser?: number; capabilities?: { drop?: string[]; add?: string[] }; seccompProfile?: { type: string } }
    const where = `${name}/${c.name}`
    if (sc.privileged) out.push(`${where}: privileged`)
    if (sc.allowPrivilegeEscalation !== false) out.push(`${where}: allowPrivilegeEscalation must be false`)
    if (!(sc.capabilities?.drop ?? []).includes('ALL')) out.push(`${where}: must drop ALL capabilities`)
    if ((sc.capabilities?.add ?? []).some((cap) => cap !== 'NET_BIND_SERVICE')) out.push(`${where}: adds capabilities`)
    if ((sc.runAsNonRoot ?? podSc.runAsNonRoot) !== true) out.push(`${where}: runAsNonRoot must be true`)
    if ((sc.runAsUser ?? podSc.runAsUser) === 0) out.push(`${where}: runs as uid 0`)
    const seccomp = (sc.seccompProfile ?? podSc.seccompProfile)?.type
    if (seccomp !== 'RuntimeDefault' && seccomp !== 'Localhost') out.push(`${where}: seccompProfile must be RuntimeDefault or Localhost`)
    for (const p of c.ports ?? []) if ((p as { hostPort?: number }).hostPort) out.push(`${where}: hostPort`)
  }
  const hostFields = spec as unknown as { hostNetwork?: boolean; hostPID?: boolean; hostIPC?: boolean }
  if (hostFields.hostNetwork || hostFields.hostPID || hostFields.hostIPC) out.push(`${name}: host namespaces`)
  return out
}

describe('Kubernetes manifests', () => {
  const renders = new Map<string, K8sObject[]>()
  let cpu: K8sObject[]

  beforeAll(async () => {
    await Promise.all(OVERLAYS.map(async (r) => renders.set(r, await render(`${OVERLAYS_DIR}/${r}`))))
    // A CPU pool as an operator would make one: a region's overlay plus the cpu-pool component.
    cpu = await renderComposition([`${OVERLAYS_DIR}/${OVERLAYS[0]}`], [CPU_POOL], 'images:\n  - name: registry.example.com/zerolayer/gpu-node\n    newTag: cpu')
  })

  it('renders every region overlay into the same set of objects', () => {
    for (const [region, objects] of renders) expect(objects.map((o) => `${o.kind}/${baseName(o)}`).sort(), region).toEqual(EXPECTED_KINDS)
  })

  it('validates every rendered object against the Kubernetes API schema', () => {
    const all = [...[...renders.values()].flat(), ...cpu]
    expect(all.flatMap(schemaErrors)).toEqual([])
  })

  it('has no field the Kubernetes API types lack (what kubectl apply --validate=strict refuses)', () => {
    const all = [...[...renders.values()].flat(), ...cpu]
    // The check itself must see a misspelt field: a control with one planted in a probe.
    const control = structuredClone(find(cpu, 'Deployment', 'zerolayer-gpu-node'))
    ;(podTemplate(control).spec.containers[0] as unknown as Record<string, unknown>).readinesProbe = { httpGet: { path: '/readyz', port: 'http' } }
    const errors = unknownFieldErrors([...all, control])
    expect(errors).toHaveLength(1)
    expect(errors[0]).toMatch(/^Deployment\/zerolayer-gpu-node: .*'"readinesProbe"' does not exist in type 'IContainer'/)
  }, 60_000)

  it('puts every namespaced object in the zerolayer namespace', () => {
    for (const objects of renders.values()) {
      for (const o of objects) {
        if (CLUSTER_SCOPED.has(o.kind)) continue
        expect(o.metadata.namespace, `${o.kind}/${o.metadata.name}`).toBe('zerolayer')
      }
      expect(find(objects, 'Namespace', 'zerolayer').metadata.labels?.['pod-security.kubernetes.io/enforce']).toBe('restricted')
    }
  })

  it('refers only to objects the overlay renders, or to the Secrets the runbook creates', () => {
    for (const objects of renders.values()) {
      const names = (kind: string) => new Set(objects.filter((o) => o.kind === kind).map((o) => o.metadata.name))
      const secretsUsed = new Set<string>()
      for (const d of deployments(objects)) {
        const spec = podTemplate(d).spec
        expect(names('ServiceAccount')).toContain(spec.serviceAccountName)
        for (const v of spec.volumes ?? []) {
          const src = v as { configMap?: { name: string }; secret?: { secretName: string }; persistentVolumeClaim?: { claimName: string } }
          if (src.configMap) expect(names('ConfigMap')).toContain(src.configMap.name)
          if (src.persistentVolumeClaim) expect(names('PersistentVolumeClaim')).toContain(src.persistentVolumeClaim.claimName)
          if (src.secret) secretsUsed.add(src.secret.secretName)
        }
        for (const c of spec.containers) {
          for (const f of c.envFrom ?? []) if (f.configMapRef) expect(names('ConfigMap')).toContain(f.configMapRef.name)
          for (const e of c.env ?? []) if (e.valueFrom?.secretKeyRef) secretsUsed.add(e.valueFrom.secretKeyRef.name)
          for (const m of c.volumeMounts ?? []) expect(spec.volumes?.map((v) => v.name)).toContain(m.name)
        }
      }
      expect([...secretsUsed].sort()).toEqual([...OPERATOR_SECRETS].sort())

      // Selectors of the Service, PDBs and NetworkPolicies each select some Deployment's pods.
      const podLabels = deployments(objects).map((d) => podTemplate(d).metadata.labels)
      const selects = (sel: Record<string, string>) => podLabels.some((l) => Object.entries(sel).every(([k, v]) => l[k] === v))
      for (const o of objects) {
        const spec = o.spec as { selector?: { matchLabels?: Record<string, string> } & Record<string, string>; podSelector?: { matchLabels: Record<string, string> } } | undefined
        if (o.kind === 'Service') expect(selects(spec!.selector as Record<string, string>), `${o.kind}/${o.metadata.name}`).toBe(true)
        if (o.kind === 'PodDisruptionBudget') expect(selects(spec!.selector!.matchLabels!), `${o.kind}/${o.metadata.name}`).toBe(true)
        if (o.kind === 'NetworkPolicy') expect(selects(spec!.podSelector!.matchLabels), `${o.kind}/${o.metadata.name}`).toBe(true)
      }
      const hpa = find(objects, 'HorizontalPodAutoscaler', 'zerolayer-gpu-node').spec as { scaleTargetRef: { kind: string; name: string } }
      expect(hpa.scaleTargetRef.kind).toBe('Deployment')
      expect(names('Deployment')).toContain(hpa.scaleTargetRef.name)
    }
  })

  it('runs every pod under the restricted Pod Security Standard, with read-only root filesystems', () => {
    for (const objects of [...renders.values(), cpu]) {
      for (const d of deployments(objects)) {
        const spec = podTemplate(d).spec
        expect(restrictedViolations(d.metadata.name, spec)).toEqual([])
        for (const c of spec.containers) expect((c.securityContext as { readOnlyRootFilesystem?: boolean }).readOnlyRootFilesystem, `${d.metadata.name}/${c.name}`).toBe(true)
        expect((spec as { automountServiceAccountToken?: boolean }).automountServiceAccountToken).toBe(false)
      }
    }
  })

  it('admits only the tunnel connector and Prometheus to a node, and nothing to the connector', () => {
    for (const objects of renders.values()) {
      const policies = objects.filter((o) => o.kind === 'NetworkPolicy')
      type Peer = { podSelector?: { matchLabels: Record<string, string> }; namespaceSelector?: { matchLabels: Record<string, string> }; ipBlock?: unknown }
      type Policy = { podSelector: { matchLabels: Record<string, string> }; policyTypes: string[]; ingress?: Array<{ from?: Peer[]; ports?: Array<{ port: string | number }> }> }
      const forPods = (name: string) => policies.map((p) => p.spec as Policy).filter((p) => p.podSelector.matchLabels['app.kubernetes.io/name'] === name)
      const nodeIngress = forPods('zerolayer-gpu-node').flatMap((p) => p.ingress ?? [])
      // Every rule names its peers (an empty `from` would admit everyone) and only the http port.
      for (const rule of nodeIngress) {
        expect(rule.from?.length).toBeGreaterThan(0)
        for (const peer of rule.from!) expect(peer.ipBlock).toBeUndefined()
        expect(rule.ports).toEqual([{ protocol: 'TCP', port: 'http' }])
      }
      const peers = nodeIngress.flatMap((r) => r.from!).map((p) => `${p.namespaceSelector?.matchLabels['kubernetes.io/metadata.name'] ?? '(same namespace)'}/${p.podSelector?.matchLabels['app.kubernetes.io/name']}`)
      expect(peers.sort()).toEqual(['(same namespace)/cloudflared', 'monitoring/prometheus'])
      expect(forPods('zerolayer-gpu-node').some((p) => p.policyTypes.includes('Egress'))).toBe(true)
      const connector = forPods('cloudflared')
      expect(connector.flatMap((p) => p.ingress ?? [])).toEqual([])
      expect(connector.some((p) => p.policyTypes.includes('Ingress'))).toBe(true)
    }
  })

  it('makes a CPU pool with the cpu-pool component: no GPU request, selector or toleration, the CPU provider', () => {
    const node = find(cpu, 'Deployment', 'zerolayer-gpu-node')
    const spec = podTemplate(node).spec
    const c = container(node, 'gpu-node')
    expect(JSON.stringify(spec)).not.toContain('nvidia.com')
    expect(spec.tolerations).toBeUndefined()
    expect(c.image).toBe('registry.example.com/zerolayer/gpu-node:cpu')
    const data = find(cpu, 'ConfigMap', c.envFrom![0]!.configMapRef!.name).data as Record<string, string>
    expect(data.EXECUTION_PROVIDER).toBe('cpu')
    expect(Number(data.INTRA_OP_THREADS)).toBe(Number(c.resources!.requests!.cpu))
    // The region's identity survives the component's merge.
    expect(data.REGION).toBe(OVERLAYS[0])
  })
})
