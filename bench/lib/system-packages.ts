/**
 * Debian packages a bench section needs (redis-server for the limiter, nginx-light as the proxy
 * floor, valgrind for instruction counts), installed the way `npm start` installs redis-server
 * (infra/local/stack.ts) and `.ci/run` installs the tests' packages: with apt-get, only when
 * missing and running as root. Otherwise nothing is installed and the caller learns what is
 * missing, to skip that part with a note.
 */
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'

export interface SystemPackage {
  /** Debian package name. */
  pkg: string
  /** Paths of the executable it provides; present when any one exists. */
  binaries: string[]
}

export const REDIS_SERVER: SystemPackage = { pkg: 'redis-server', binaries: ['/usr/bin/redis-server', '/usr/local/bin/redis-server'] }
export const NGINX_LIGHT: SystemPackage = { pkg: 'nginx-light', binaries: ['/usr/sbin/nginx', '/usr/bin/nginx', '/usr/local/sbin/nginx'] }
export const VALGRIND: SystemPackage = { pkg: 'valgrind', binaries: ['/usr/bin/valgrind', '/usr/local/bin/valgrind'] }

const present = (p: SystemPackage) => p.binaries.some((b) => existsSync(b))

/** Installs the missing ones when root; returns the packages still missing afterwards. */
export function ensureSystemPackages(packages: SystemPackage[], log: (line: string) => void): string[] {
  const missing = packages.filter((p) => !present(p))
  if (missing.length === 0) return []
  const names = missing.map((p) => p.pkg)
  if (process.getuid?.() !== 0) {
    log(`missing ${names.join(', ')} and not root: apt-get install -y ${names.join(' ')}`)
    return names
  }
  log(`installing ${names.join(', ')} (apt-get)`)
  try {
    execFileSync('sh', ['-c', `apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${names.join(' ')}`], { stdio: 'inherit', timeout: 600_000 })
  } catch (e) {
    log(`apt-get failed: ${(e as Error).message.split('\n')[0]}`)
  }
  return missing.filter((p) => !present(p)).map((p) => p.pkg)
}
