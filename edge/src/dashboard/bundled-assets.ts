/**
 * The dashboard files bundled into the Worker as Text modules (wrangler.toml [[rules]]: the
 * page folder and the two uplot files). Imported by the Workers entry only: Node cannot import
 * text (the Node entry reads the same files: file-assets.ts).
 */
import uplotCss from 'uplot/dist/uPlot.min.css'
import uplotJs from 'uplot/dist/uPlot.iife.min.js'
import { toDashboardAssets, type DashboardAssets } from './dashboard-assets.ts'
import dashboardCss from './page/dashboard.css'
import dashboardJs from './page/dashboard.js'
import indexHtml from './page/index.html'

export const BUNDLED_DASHBOARD_ASSETS: DashboardAssets = toDashboardAssets({
  'index.html': indexHtml,
  'dashboard.js': dashboardJs,
  'dashboard.css': dashboardCss,
  'uplot.js': uplotJs,
  'uplot.css': uplotCss,
})
