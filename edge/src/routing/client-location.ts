/**
 * Where the client is, for routing: Cloudflare's `request.cf` coordinates, else this edge's own
 * (EDGE_LAT/EDGE_LON). Only with DEV_MODE (local stack, tests, benchmarks) may a request place
 * itself with `x-zl-client-geo: <lat>,<lon>`; production configs never set DEV_MODE.
 */
import type { EdgeConfig } from '../config.ts'
import type { GeoPoint } from './pick-node.ts'

export const CLIENT_GEO_HEADER = 'x-zl-client-geo'

interface CfGeo {
  latitude?: string | number
  longitude?: string | number
  colo?: string
}

export function clientLocation(req: Request, config: Pick<EdgeConfig, 'devMode' | 'edgeLat' | 'edgeLon'>): GeoPoint {
  if (config.devMode) {
    const dev = parseGeo(req.headers.get(CLIENT_GEO_HEADER))
    if (dev) return dev
  }
  const cf = cfOf(req)
  const fromCf = toPoint(cf?.latitude, cf?.longitude)
  return fromCf ?? { lat: config.edgeLat, lon: config.edgeLon }
}

/** The Cloudflare colo serving this request (e.g. `DUB`), when known. */
export function edgeColo(req: Request): string | undefined {
  const colo = cfOf(req)?.colo
  return typeof colo === 'string' && colo !== '' ? colo : undefined
}

export function parseGeo(header: string | null | undefined): GeoPoint | undefined {
  const m = header?.match(/^\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*$/)
  return m ? toPoint(m[1], m[2]) : undefined
}

function toPoint(lat: unknown, lon: unknown): GeoPoint | undefined {
  if (lat === undefined || lon === undefined || lat === '' || lon === '') return undefined
  const la = Number(lat)
  const lo = Number(lon)
  if (!Number.isFinite(la) || !Number.isFinite(lo) || Math.abs(la) > 90 || Math.abs(lo) > 180) return undefined
  return { lat: la, lon: lo }
}

function cfOf(req: Request): CfGeo | undefined {
  return (req as Request & { cf?: CfGeo }).cf
}
