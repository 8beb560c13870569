/**
 * The edge's Workers bundle as `wrangler deploy` would upload it, built offline with
 * `--dry-run --outdir` for each environment wrangler.toml declares. The command is exported for
 * the runbook check (infra/deploy-runbook.test.ts).
 */
import { readFileSync } from 'node:fs'
import { parse as parseToml } from 'smol-toml'
import { REPO_ROOT } from '../k8s/kustomize.ts'

export interface WranglerToml {
  name: string
  main: string
  compatibility_date: string
  compatibility_flags?: string[]
  vars?: Record<string, string>
  env?: Record<string, { name?: string; vars?: Record<string, string>; compatibility_date?: string; compatibility_flags?: string[] }>
}

export function readWranglerToml(): WranglerToml {
  return parseToml(readFileSync(`${REPO_ROOT}/wrangler.toml`, 'utf8')) as unknown as WranglerToml
}

/** The [env.*] tables: what `wrangler deploy -e NAME` deploys. */
export const WRANGLER_ENVS: readonly string[] = Object.keys(readWranglerToml().env ?? {}).sort()

export function dryRunOutdir(env: string): string {
  return `dist/edge-${env}`
}

export function dryRunCommand(env: string): string[] {
  return ['npx', 'wrangler', 'deploy', '--dry-run', '--outdir', dryRunOutdir(env), '-e', env]
}
