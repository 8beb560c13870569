/**
 * A table of dialect codecs, looked up by name and by route. Built once at module load (index.ts
 * builds the production one), so a request's lookup is one Map read.
 */

import type { DialectCodec } from './codec.ts'

export interface DialectTable<Name extends string = string> {
  /** In registration order; the first one also answers errors on paths no dialect serves. */
  readonly codecs: readonly DialectCodec<Name>[]
  get(name: Name): DialectCodec<Name>
  /** The dialect served on a URL pathname (a trailing slash is tolerated); undefined for other paths. */
  forPath(path: string): DialectCodec<Name> | undefined
  /** The dialect whose error shape fits a path, for errors raised before (or without) routing. */
  errorCodecForPath(path: string): DialectCodec<Name>
}

/** The table of `codecs`; throws when there is none, or two share a name or a route (wiring mistakes, caught at boot). */
export function dialectTable<Name extends string>(codecs: readonly DialectCodec<Name>[]): DialectTable<Name> {
  const fallback = codecs[0]
  if (!fallback) throw new Error('A dialect table needs at least one dialect.')
  const byName = new Map<string, DialectCodec<Name>>()
  const byPath = new Map<string, DialectCodec<Name>>()
  for (const codec of codecs) {
    if (byName.has(codec.name)) throw new Error(`Two dialects are named '${codec.name}'.`)
    if (byPath.has(codec.path)) throw new Error(`Two dialects are served on '${codec.path}'.`)
    byName.set(codec.name, codec)
    byPath.set(codec.path, codec)
  }
  const forPath = (path: string) => byPath.get(path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path)
  return {
    codecs,
    // A typed name is one of the table's own.
    get: (name) => byName.get(name)!,
    forPath,
    errorCodecForPath: (path) => forPath(path) ?? fallback,
  }
}
