/**
 * `npm run bench` needs redis-server for the sections behind the limiter and registry and
 * nginx-light for the edge section; missing ones are named with their install line when not root.
 */
import { describe, expect, it } from 'vitest'
import { ensureDebianTools, findExecutable } from '../../infra/local/debian-packages.ts'
import { benchTools } from './bench-tools.ts'

describe('bench tools', () => {
  it('asks for redis-server and nginx-light only where a section uses them', () => {
    expect(benchTools(['engine']).map((t) => t.package)).toEqual([])
    expect(benchTools(['wan']).map((t) => t.package)).toEqual(['redis-server'])
    expect(benchTools(['engine', 'edge']).map((t) => t.package)).toEqual(['redis-server', 'nginx-light'])
  })

  it('names every missing package with its install line when not root, and installs nothing', () => {
    const status: string[] = []
    const missing = (pkg: string) => ({ package: pkg, find: () => findExecutable(`zl-missing-${pkg}`, pkg, []) })
    expect(() => ensureDebianTools([missing('a-pkg'), missing('b-pkg')], (l) => status.push(l), false)).toThrow(
      /zl-missing-a-pkg not found .*apt-get install -y a-pkg; zl-missing-b-pkg not found .*apt-get install -y b-pkg \(as root, or with sudo\)/,
    )
    expect(status).toEqual([])
  })

  it('returns the paths of tools that are there', () => {
    expect(ensureDebianTools([{ package: 'coreutils', find: () => findExecutable('sh', 'dash') }], () => {}, false)).toEqual([expect.stringMatching(/\/sh$/)])
  })
})
