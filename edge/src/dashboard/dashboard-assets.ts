/**
 * The dashboard's static files, held as text by each entry: the Workers entry imports them as
 * Text modules (wrangler.toml [[rules]], bundled into the Worker: bundled-assets.ts), the Node
 * entry reads the same files once at start (file-assets.ts). Nothing comes from a CDN.
 */

/** Served name (under /dashboard/) → content type. `index.html` is the page itself (/dashboard). */
export const DASHBOARD_FILES = {
  'index.html': 'text/html; charset=utf-8',
  'dashboard.js': 'text/javascript; charset=utf-8',
  'dashboard.css': 'text/css; charset=utf-8',
  'uplot.js': 'text/javascript; charset=utf-8',
  'uplot.css': 'text/css; charset=utf-8',
} as const
export type DashboardFile = keyof typeof DASHBOARD_FILES

/** Where each served file comes from: this folder's page/, or the uplot package (pinned in package.json). */
export const DASHBOARD_SOURCES: Record<DashboardFile, { page: string } | { uplot: string }> = {
  'index.html': { page: 'index.html' },
  'dashboard.js': { page: 'dashboard.js' },
  'dashboard.css': { page: 'dashboard.css' },
  'uplot.js': { uplot: 'uPlot.iife.min.js' },
  'uplot.css': { uplot: 'uPlot.min.css' },
}

export interface DashboardAsset {
  body: string
  contentType: string
}

export type DashboardAssets = ReadonlyMap<string, DashboardAsset>

export function toDashboardAssets(texts: Record<DashboardFile, string>): DashboardAssets {
  return new Map(
    (Object.keys(DASHBOARD_FILES) as DashboardFile[]).map((name) => [name, { body: texts[name], contentType: DASHBOARD_FILES[name] }]),
  )
}
