/**
 * `GET /v1/stats/latency` query, parsed at the boundary: `window` (`<n>m` or `<n>h`, 1 minute to
 * 24 hours, default 15m), and optional exact-match filters `region` (node region) and `edge`.
 */
import { z } from 'zod'

export const MIN_WINDOW_MINUTES = 1
export const MAX_WINDOW_MINUTES = 24 * 60

const name = z.string().trim().min(1).max(64)

export const LatencyStatsQuery = z.object({
  window: z
    .string()
    .regex(/^\d{1,4}[mh]$/, "must look like '15m' or '6h'")
    .transform((w) => ({ text: w, minutes: Number(w.slice(0, -1)) * (w.endsWith('h') ? 60 : 1) }))
    .refine((w) => w.minutes >= MIN_WINDOW_MINUTES && w.minutes <= MAX_WINDOW_MINUTES, 'must be between 1m and 24h')
    .default({ text: '15m', minutes: 15 }),
  region: name.optional(),
  edge: name.optional(),
})
export type LatencyStatsQuery = z.infer<typeof LatencyStatsQuery>
