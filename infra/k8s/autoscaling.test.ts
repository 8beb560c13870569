/**
 * The queue-depth autoscaling chain, link by link, offline: the node exports the gauge → the
 * Prometheus job (cluster/prometheus-scrape-config.yaml) keeps the node pods' targets and labels
 * their series with namespace and pod → the Prometheus Adapter rule
 * (cluster/prometheus-adapter-values.yaml) turns those labels into Kubernetes objects and serves
 * the metric under the name the HPA asks for. The relabelling runs here with Prometheus' rules.
 */
import { readFileSync } from 'node:fs'
import { beforeAll, describe, expect, it } from 'vitest'
import { parse as parseYaml } from 'yaml'
import { startTestNode } from '../../gpu-node/test/support/test-node.ts'
import { find, K8S_DIR, OVERLAYS, OVERLAYS_DIR, render, REPO_ROOT, type K8sObject } from './kustomize.ts'
import { podTemplate } from './pod-spec.ts'

interface RelabelConfig {
  source_labels?: string[]
  separator?: string
  regex?: string
  target_label?: string
  replacement?: string
  action?: 'replace' | 'keep' | 'drop'
}
interface ScrapeConfig {
  job_name: string
  kubernetes_sd_configs: Array<{ role: string; namespaces?: { names: string[] } }>
  relabel_configs: RelabelConfig[]
}

/**
 * Prometheus' relabelling for the actions the job uses (prometheus/model/relabel): the source
 * values joined by ";", matched against the fully anchored regex (default "(.*)"); keep/drop
 * filter the target; replace writes the expanded replacement (default "$1") when it matches.
 * Returns undefined for a dropped target.
 */
function relabel(labels: Record<string, string>, configs: readonly RelabelConfig[]): Record<string, string> | undefined {
  let out = { ...labels }
  for (const c of configs) {
    const value = (c.source_labels ?? []).map((l) => out[l] ?? '').join(c.separator ?? ';')
    const re = new RegExp(`^(?:${c.regex ?? '(.*)'})$`)
    const m = re.exec(value)
    const action = c.action ?? 'replace'
    if (action === 'keep' && !m) return undefined
    if (action === 'drop' && m) return undefined
    if (action === 'replace' && m) {
      const result = (c.replacement ?? '$1').replace(/\$(\d+)|\$\{(\d+)\}/g, (_, a: string | undefined, b: string | undefined) => m[Number(a ?? b)] ?? '')
      if (result === '') delete out[c.target_label!]
      else out = { ...out, [c.target_label!]: result }
    }
  }
  return out
}

/** Prometheus' Kubernetes pod discovery: one target per declared container port, annotations as sanitised meta labels. */
function discoveredTargets(namespace: string, podName: string, podIp: string, template: ReturnType<typeof podTemplate>): Array<Record<string, string>> {
  const meta: Record<string, string> = { __meta_kubernetes_namespace: namespace, __meta_kubernetes_pod_name: podName }
  for (const [k, v] of Object.entries(template.metadata.annotations ?? {})) meta[`__meta_kubernetes_pod_annotation_${k.replace(/[^a-zA-Z0-9_]/g, '_')}`] = v
  for (const [k, v] of Object.entries(template.metadata.labels)) meta[`__meta_kubernetes_pod_label_${k.replace(/[^a-zA-Z0-9_]/g, '_')}`] = v
  return template.spec.containers.flatMap((c) =>
    (c.ports ?? []).map((p) => ({
      ...meta,
      __address__: `${podIp}:${p.containerPort}`,
      __metrics_path__: '/metrics',
      __meta_kubernetes_pod_container_name: c.name,
      __meta_kubernetes_pod_container_port_name: p.name ?? '',
      __meta_kubernetes_pod_container_port_number: String(p.containerPort),
    })),
  )
}

describe('autoscaling on queue depth', () => {
  let objects: K8sObject[]
  let exportedGauges: Set<string>
  const scrape = (parseYaml(readFileSync(`${REPO_ROOT}/${K8S_DIR}/cluster/prometheus-scrape-config.yaml`, 'utf8')) as ScrapeConfig[])[0]!
  const adapter = parseYaml(readFileSync(`${REPO_ROOT}/${K8S_DIR}/cluster/prometheus-adapter-values.yaml`, 'utf8')) as {
    rules: { default: boolean; custom: Array<{ seriesQuery: string; resources: { overrides: Record<string, { resource: string }> }; name: { matches: string; as: string }; metricsQuery: string }> }
  }

  beforeAll(async () => {
    objects = await render(`${OVERLAYS_DIR}/${OVERLAYS[0]}`)
    const node = await startTestNode()
    try {
      const text = await (await fetch(`${node.url}/metrics`)).text()
      exportedGauges = new Set([...text.matchAll(/^# TYPE (\w+) gauge$/gm)].map((m) => m[1]!))
    } finally {
      await node.close()
    }
  })

  it('scales the node Deployment on a pods metric the node exports as a gauge, not on CPU', () => {
    const hpa = find(objects, 'HorizontalPodAutoscaler', 'zerolayer-gpu-node').spec as {
      minReplicas: number
      maxReplicas: number
      metrics: Array<{ type: string; pods?: { metric: { name: string }; target: { type: string; averageValue: string } } }>
    }
    expect(hpa.metrics.map((m) => m.type)).toEqual(['Pods'])
    const metric = hpa.metrics[0]!.pods!
    expect(metric.metric.name).toBe('zl_num_requests_waiting')
    expect(exportedGauges).toContain(metric.metric.name)
    expect(metric.target.type).toBe('AverageValue')
    expect(Number(metric.target.averageValue)).toBeGreaterThan(0)
    // At least two pods: one can drain (or load its model) while the other serves.
    expect(hpa.minReplicas).toBeGreaterThanOrEqual(2)
    expect(hpa.maxReplicas).toBeGreaterThan(hpa.minReplicas)
  })

  it('scrapes each node pod once, at its http port and metrics path, labelled with namespace and pod', () => {
    const node = find(objects, 'Deployment', 'zerolayer-gpu-node')
    const template = podTemplate(node)
    const ns = node.metadata.namespace!
    expect(scrape.kubernetes_sd_configs).toEqual([{ role: 'pod', namespaces: { names: [ns] } }])
    const kept = discoveredTargets(ns, 'zerolayer-gpu-node-abc12-xyz34', '10.1.2.3', template)
      .map((t) => relabel(t, scrape.relabel_configs))
      .filter((t) => t !== undefined)
    expect(kept).toHaveLength(1)
    const port = template.spec.containers[0]!.ports!.find((p) => p.name === 'http')!.containerPort
    expect(kept[0]).toMatchObject({ __address__: `10.1.2.3:${port}`, __metrics_path__: template.metadata.annotations!['prometheus.io/path'], namespace: ns, pod: 'zerolayer-gpu-node-abc12-xyz34' })

    // The tunnel connector (no scrape annotation) is not scraped by this job.
    const cf = podTemplate(find(objects, 'Deployment', 'cloudflared'))
    expect(discoveredTargets(ns, 'cloudflared-1', '10.1.2.4', cf).map((t) => relabel(t, scrape.relabel_configs)).filter(Boolean)).toEqual([])
  })

  it('serves that metric through the Prometheus Adapter under the name the HPA asks for, per pod', () => {
    expect(adapter.rules.default).toBe(false)
    const [rule, ...others] = adapter.rules.custom
    expect(others).toEqual([])
    const series = /^(\w+)\{(.*)\}$/.exec(rule!.seriesQuery)!
    expect(series[1]).toBe('zl_num_requests_waiting')
    // The labels the rule maps to objects are the ones the scrape job attaches.
    const relabelled = new Set(scrape.relabel_configs.map((c) => c.target_label).filter((l): l is string => l !== undefined && !l.startsWith('__')))
    expect(Object.fromEntries(Object.entries(rule!.resources.overrides).map(([label, o]) => [label, o.resource]))).toEqual({ namespace: 'namespace', pod: 'pod' })
    for (const label of Object.keys(rule!.resources.overrides)) {
      expect(relabelled).toContain(label)
      expect(series[2]).toContain(`${label}!=""`)
    }
    expect(new RegExp(rule!.name.matches).test(series[1]!)).toBe(true)
    expect(rule!.name.as).toBe('zl_num_requests_waiting')
    expect(rule!.metricsQuery).toContain('<<.Series>>{<<.LabelMatchers>>}')
    expect(rule!.metricsQuery).toContain('by (<<.GroupBy>>)')
  })
})
