/**
 * GET /dashboard (the page) and GET /dashboard/<file> (its script, styles and uPlot), public:
 * they hold no data. The data routes they call (/v1/stats/latency, /v1/regions) need the token
 * the user enters on the page, sent as a header.
 *
 * Content-Security-Policy allows only this origin's scripts, styles and fetches: no inline
 * script or style (the page has none; uPlot styles elements through the CSSOM, which CSP
 * allows), no framing, no plugins, no form posts.
 */
import type { Context } from 'hono'
import { ApiError } from '../../../shared/src/api-error.ts'
import type { AppEnv } from '../context.ts'
import type { DashboardAsset, DashboardAssets } from './dashboard-assets.ts'

export const DASHBOARD_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ')

export function dashboardPage(assets: DashboardAssets | undefined) {
  return (c: Context<AppEnv>) => serve(c, assets?.get('index.html'))
}

export function dashboardFile(assets: DashboardAssets | undefined) {
  return (c: Context<AppEnv>) => {
    const name = c.req.param('file')
    return serve(c, name === undefined || name === 'index.html' ? undefined : assets?.get(name))
  }
}

function serve(c: Context<AppEnv>, asset: DashboardAsset | undefined): Response {
  if (!asset) throw new ApiError('not_found', `Unknown route: GET ${c.req.path.slice(0, 200)}`)
  return new Response(c.req.method === 'HEAD' ? null : asset.body, {
    headers: {
      'content-type': asset.contentType,
      'content-security-policy': DASHBOARD_CSP,
      'x-content-type-options': 'nosniff',
      'x-frame-options': 'DENY',
      'referrer-policy': 'no-referrer',
      // Revalidated on every load: a deploy changes the files under the same names.
      'cache-control': 'no-cache',
    },
  })
}
