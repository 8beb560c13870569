/**
 * The Debian packages `npm run bench` needs for the sections it runs, installed on a fresh
 * machine the way `npm start` installs redis-server (infra/local/debian-packages.ts): redis-server
 * for the sections behind the rate limiter and registry, nginx-light for the edge section's floor
 * (the proxy with nothing of ours in it).
 */
import { ensureDebianTools, findExecutable, type DebianTool } from '../../infra/local/debian-packages.ts'
import { findRedisServer } from '../../infra/local/redis-process.ts'
import type { SectionName } from './report.ts'

const REDIS: DebianTool = { package: 'redis-server', find: () => findRedisServer() }
const NGINX: DebianTool = { package: 'nginx-light', find: () => findExecutable('nginx', 'nginx-light') }

/** Sections that start redis-server (directly or behind the Upstash bridge). */
const NEEDS_REDIS: readonly SectionName[] = ['edge', 'ratelimit', 'prefix', 'wan']

export function benchTools(sections: readonly SectionName[]): DebianTool[] {
  return [...(sections.some((s) => NEEDS_REDIS.includes(s)) ? [REDIS] : []), ...(sections.includes('edge') ? [NGINX] : [])]
}

/** Finds or installs what `sections` need; throws with the install instruction when missing and not root. */
export function ensureBenchTools(sections: readonly SectionName[], status: (line: string) => void): void {
  ensureDebianTools(benchTools(sections), status)
}
