/**
 * Debian packages the local stack (`npm start`) and the bench (`npm run bench`) need on a fresh
 * machine: found when present, installed with apt-get when missing and running as root (a fresh
 * container), else a clear instruction. One place, so both install the same way.
 */
import { execFileSync } from 'node:child_process'
import { accessSync, constants } from 'node:fs'
import { delimiter, join } from 'node:path'

export interface DebianTool {
  /** The Debian package that provides it (`redis-server`, `nginx-light`). */
  package: string
  /** Its absolute path, or throws saying it is missing (e.g. findRedisServer). */
  find(): string
}

/** The tools' paths, in order; installs every missing one in one apt-get run when root. */
export function ensureDebianTools(tools: readonly DebianTool[], status: (line: string) => void, isRoot = process.getuid?.() === 0): string[] {
  const missing: Array<{ tool: DebianTool; error: Error }> = []
  for (const tool of tools) {
    try {
      tool.find()
    } catch (e) {
      missing.push({ tool, error: e as Error })
    }
  }
  if (missing.length > 0) {
    if (!isRoot) throw new Error(`${missing.map((m) => m.error.message).join('; ')} (as root, or with sudo)`)
    const packages = missing.map((m) => m.tool.package)
    status(`${packages.join(', ')} missing: apt-get install -y ${packages.join(' ')}`)
    execFileSync('sh', ['-c', `apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${packages.join(' ')}`], { stdio: 'inherit' })
  }
  return tools.map((t) => t.find())
}

/** An executable on PATH or in `dirs` (sbin is off a non-root PATH), or an error naming its package. */
export function findExecutable(binary: string, pkg: string, dirs: readonly string[] = ['/usr/sbin', '/usr/bin', '/usr/local/bin']): string {
  for (const dir of [...(process.env.PATH ?? '').split(delimiter).filter(Boolean), ...dirs]) {
    const path = join(dir, binary)
    try {
      accessSync(path, constants.X_OK)
      return path
    } catch { /* next */ }
  }
  throw new Error(`${binary} not found (looked on PATH, ${dirs.join(', ')}); install it: apt-get install -y ${pkg}`)
}
