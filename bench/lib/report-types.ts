/** What a scenario gets and returns. */

export interface BenchContext {
  quick: boolean
  /** One progress line (prefixed with the scenario name by the runner). */
  log(msg: string): void
}

export interface ChartSeries {
  mode: string
  points: Array<{ offeredRps: number; throughputTokS: number; p99TtftMs: number; censored: number }>
}

export interface SectionResult {
  /** Figures keyed as in the target table, without the section prefix. */
  figures: Record<string, number | null>
  /** Every number the figures were computed from (and more), for latest.json. */
  raw: Record<string, unknown>
  /** Caveats a reader needs (e.g. how a figure was measured when the direct way was unavailable). */
  notes: string[]
  chart?: ChartSeries[]
}
