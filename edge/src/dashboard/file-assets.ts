/**
 * The dashboard files for the Node entry, read once at start from this folder's page/ and the
 * installed uplot package: the same bytes the Worker bundles (bundled-assets.ts).
 */
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { DASHBOARD_FILES, DASHBOARD_SOURCES, toDashboardAssets, type DashboardAssets, type DashboardFile } from './dashboard-assets.ts'

export function readDashboardAssets(): DashboardAssets {
  const require = createRequire(import.meta.url)
  const texts = {} as Record<DashboardFile, string>
  for (const name of Object.keys(DASHBOARD_FILES) as DashboardFile[]) {
    const source = DASHBOARD_SOURCES[name]
    const path = 'page' in source ? new URL(`./page/${source.page}`, import.meta.url) : require.resolve(`uplot/dist/${source.uplot}`)
    texts[name] = readFileSync(path, 'utf8')
  }
  return toDashboardAssets(texts)
}
