/**
 * Typed views of the parts of rendered objects the deploy tests read (the rendered YAML is
 * untyped; the API schema itself is checked in api-schema.ts).
 */
import type { K8sObject } from './kustomize.ts'
import { find } from './kustomize.ts'

export interface Probe {
  httpGet?: { path: string; port: string | number }
  periodSeconds?: number
  timeoutSeconds?: number
  failureThreshold?: number
}

export interface EnvVar {
  name: string
  value?: string
  valueFrom?: { fieldRef?: { fieldPath: string }; secretKeyRef?: { name: string; key: string }; configMapKeyRef?: { name: string; key: string } }
}

export interface Container {
  name: string
  image: string
  args?: string[]
  ports?: Array<{ name?: string; containerPort: number; protocol?: string }>
  env?: EnvVar[]
  envFrom?: Array<{ configMapRef?: { name: string }; secretRef?: { name: string } }>
  resources?: { requests?: Record<string, string | number>; limits?: Record<string, string | number> }
  startupProbe?: Probe
  readinessProbe?: Probe
  livenessProbe?: Probe
  securityContext?: Record<string, unknown>
  volumeMounts?: Array<{ name: string; mountPath: string; readOnly?: boolean }>
}

export interface PodSpec {
  serviceAccountName?: string
  terminationGracePeriodSeconds?: number
  securityContext?: Record<string, unknown>
  nodeSelector?: Record<string, string>
  tolerations?: Array<Record<string, string>>
  containers: Container[]
  initContainers?: Container[]
  volumes?: Array<{ name: string; [source: string]: unknown }>
}

export interface PodTemplate {
  metadata: { labels: Record<string, string>; annotations?: Record<string, string> }
  spec: PodSpec
}

export function podTemplate(deployment: K8sObject): PodTemplate {
  return (deployment.spec as { template: PodTemplate }).template
}

export function container(deployment: K8sObject, name: string): Container {
  const c = podTemplate(deployment).spec.containers.find((x) => x.name === name)
  if (!c) throw new Error(`${deployment.metadata.name} has no container ${name}`)
  return c
}

/** The value of a container port by name (how probes and Services refer to it). */
export function portNumber(c: Container, port: string | number): number {
  if (typeof port === 'number') return port
  const hit = c.ports?.find((p) => p.name === port)
  if (!hit) throw new Error(`container ${c.name} has no port named ${port}`)
  return hit.containerPort
}

/** A quantity such as 32Gi, 512Mi or 4 in bytes (memory) or units (cpu, GPUs). */
export function quantity(q: string | number): number {
  if (typeof q === 'number') return q
  const m = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T|m)?$/.exec(q)
  if (!m) throw new Error(`unsupported quantity ${q}`)
  const scale: Record<string, number> = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, k: 1e3, M: 1e6, G: 1e9, T: 1e12, m: 1e-3 }
  return Number(m[1]) * (m[2] ? scale[m[2]]! : 1)
}

/**
 * The environment a container's process starts with, as the kubelet builds it: envFrom
 * ConfigMaps first, then `env` entries (which win). Secret and field references are filled by
 * `resolve`, standing in for the Secret a cluster operator creates and for the pod's own name.
 */
export function containerEnv(objects: readonly K8sObject[], c: Container, resolve: (ref: NonNullable<EnvVar['valueFrom']>) => string): Record<string, string> {
  const env: Record<string, string> = {}
  for (const from of c.envFrom ?? []) {
    if (!from.configMapRef) throw new Error(`container ${c.name}: only ConfigMap envFrom is expected`)
    Object.assign(env, (find(objects, 'ConfigMap', from.configMapRef.name).data ?? {}) as Record<string, string>)
  }
  for (const v of c.env ?? []) env[v.name] = v.value ?? resolve(v.valueFrom ?? {})
  return env
}
