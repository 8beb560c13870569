import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { startTestNode } from '../../gpu-node/test/support/test-node.ts'

/** Every metric the shipped Grafana dashboard queries must be one the node exports on /metrics. */
describe('infra/grafana dashboard', () => {
  const dashboard = JSON.parse(readFileSync('infra/grafana/zerolayer-node-dashboard.json', 'utf8')) as {
    panels: { title: string; targets: { expr: string }[] }[]
  }
  const exprs = dashboard.panels.flatMap((p) => p.targets.map((t) => t.expr))

  it('parses and has per-region panels for TTFT, ITL, e2e, tokens/s, queue, KV usage and batch size', () => {
    const titles = dashboard.panels.map((p) => p.title).join(' | ')
    for (const word of ['first token', 'Inter-token', 'End-to-end', 'tokens/s', 'Queue', 'KV cache', 'Batch size', 'Prefix cache hit rate']) expect(titles).toContain(word)
    expect(exprs.every((e) => e.includes('region'))).toBe(true)
  })

  it('queries only metrics the node exports', async () => {
    const node = await startTestNode()
    try {
      const scraped = await (await fetch(`${node.url}/metrics`)).text()
      // A labelled counter has no sample until first used, but its # TYPE line is always there.
      const exported = new Set<string>()
      for (const [, name, type] of scraped.matchAll(/^# TYPE (zl_[a-z0-9_]+) (\w+)$/gm)) {
        exported.add(name)
        if (type === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) exported.add(name + suffix)
      }
      const queried = new Set(exprs.flatMap((e) => [...e.matchAll(/\bzl_[a-z0-9_]+/g)].map((m) => m[0])))
      expect(queried.size).toBeGreaterThan(10)
      for (const name of queried) expect(exported, `${name} is queried but not exported`).toContain(name)
    } finally {
      await node.close()
    }
  })
})
