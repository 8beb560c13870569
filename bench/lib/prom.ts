/** Reads numbers out of a Prometheus text exposition (the node's /metrics). */

export interface Sample {
  name: string
  labels: Record<string, string>
  value: number
}

export function parseProm(text: string): Sample[] {
  const out: Sample[] = []
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line)
    if (!m) continue
    const labels: Record<string, string> = {}
    if (m[3]) for (const lm of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[lm[1]] = lm[2]
    out.push({ name: m[1], labels, value: Number(m[4]) })
  }
  return out
}

/** Sum of the samples named `name` whose labels include `match`. */
export function promValue(samples: Sample[], name: string, match: Record<string, string> = {}): number {
  let sum = 0
  for (const s of samples) {
    if (s.name !== name) continue
    if (Object.entries(match).every(([k, v]) => s.labels[k] === v)) sum += s.value
  }
  return sum
}
