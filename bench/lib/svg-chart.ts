/**
 * A small SVG writer for the one results chart: throughput (linear) and p99 TTFT (log) against
 * offered load, one line per engine mode, two panels side by side. Plain strings, no DOM.
 */
import type { ChartSeries } from './report-types.ts'

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd']
const W = 980
const H = 420
const PANEL_W = 420
const PANEL_H = 290
const TOP = 62
const LEFTS = [80, 80 + PANEL_W + 70]

export function throughputTtftSvg(series: ChartSeries[], subtitle: string): string {
  const xs = series.flatMap((s) => s.points.map((p) => p.offeredRps))
  const xMax = niceMax(Math.max(...xs, 0.1))
  const tMax = niceMax(Math.max(...series.flatMap((s) => s.points.map((p) => p.throughputTokS)), 1))
  const ttfts = series.flatMap((s) => s.points.map((p) => p.p99TtftMs)).filter((v) => v > 0)
  const lMin = 10 ** Math.floor(Math.log10(Math.max(1, Math.min(...ttfts, 1000))))
  const lMax = 10 ** Math.ceil(Math.log10(Math.max(...ttfts, 10)))

  const parts: string[] = []
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="system-ui, -apple-system, Segoe UI, sans-serif" font-size="12">`)
  parts.push(`<rect width="${W}" height="${H}" fill="#fff"/>`)
  parts.push(`<text x="${W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="600">Engine modes under Poisson load</text>`)
  parts.push(`<text x="${W / 2}" y="40" text-anchor="middle" fill="#555">${esc(subtitle)}</text>`)

  // Panel 1: throughput, linear.
  const x1 = (v: number) => LEFTS[0] + (v / xMax) * PANEL_W
  const y1 = (v: number) => TOP + PANEL_H - (v / tMax) * PANEL_H
  parts.push(axes(LEFTS[0], 'offered load (requests/s)', 'throughput (tokens/s)'))
  for (const t of ticks(0, xMax)) parts.push(xTick(x1(t), fmt(t)))
  for (const t of ticks(0, tMax)) parts.push(yTick(LEFTS[0], y1(t), fmt(t)))
  series.forEach((s, i) => parts.push(line(s.points.map((p) => [x1(p.offeredRps), y1(p.throughputTokS), p.censored > 0]), COLORS[i % COLORS.length])))

  // Panel 2: p99 TTFT, log scale.
  const x2 = (v: number) => LEFTS[1] + (v / xMax) * PANEL_W
  const span = Math.log10(lMax) - Math.log10(lMin)
  const y2 = (v: number) => TOP + PANEL_H - ((Math.log10(Math.max(v, lMin)) - Math.log10(lMin)) / span) * PANEL_H
  parts.push(axes(LEFTS[1], 'offered load (requests/s)', 'p99 time to first token (ms, log)'))
  for (const t of ticks(0, xMax)) parts.push(xTick(x2(t), fmt(t)))
  for (let d = lMin; d <= lMax * 1.0001; d *= 10) parts.push(yTick(LEFTS[1], y2(d), fmt(d)))
  series.forEach((s, i) => parts.push(line(s.points.map((p) => [x2(p.offeredRps), y2(p.p99TtftMs), p.censored > 0]), COLORS[i % COLORS.length])))

  // Legend.
  const ly = H - 22
  let lx = LEFTS[0]
  series.forEach((s, i) => {
    parts.push(`<line x1="${lx}" y1="${ly}" x2="${lx + 22}" y2="${ly}" stroke="${COLORS[i % COLORS.length]}" stroke-width="2.5"/>`)
    parts.push(`<text x="${lx + 28}" y="${ly + 4}">${esc(s.mode)}</text>`)
    lx += 50 + s.mode.length * 7
  })
  parts.push(`<circle cx="${lx + 6}" cy="${ly}" r="4" fill="#fff" stroke="#444" stroke-width="1.5"/>`)
  parts.push(`<text x="${lx + 16}" y="${ly + 4}" fill="#444">hollow: some requests cut off (TTFT is a lower bound)</text>`)
  parts.push('</svg>')
  return parts.join('\n') + '\n'
}

function axes(left: number, xLabel: string, yLabel: string): string {
  const bottom = TOP + PANEL_H
  return [
    `<rect x="${left}" y="${TOP}" width="${PANEL_W}" height="${PANEL_H}" fill="none" stroke="#999"/>`,
    `<text x="${left + PANEL_W / 2}" y="${bottom + 36}" text-anchor="middle" fill="#333">${esc(xLabel)}</text>`,
    `<text transform="translate(${left - 52},${TOP + PANEL_H / 2}) rotate(-90)" text-anchor="middle" fill="#333">${esc(yLabel)}</text>`,
  ].join('\n')
}

function xTick(x: number, label: string): string {
  const bottom = TOP + PANEL_H
  return `<line x1="${x.toFixed(1)}" y1="${bottom}" x2="${x.toFixed(1)}" y2="${bottom + 5}" stroke="#999"/><text x="${x.toFixed(1)}" y="${bottom + 18}" text-anchor="middle" fill="#555">${label}</text>`
}

function yTick(left: number, y: number, label: string): string {
  return `<line x1="${left - 5}" y1="${y.toFixed(1)}" x2="${left + PANEL_W}" y2="${y.toFixed(1)}" stroke="#eee"/><text x="${left - 8}" y="${(y + 4).toFixed(1)}" text-anchor="end" fill="#555">${label}</text>`
}

function line(points: Array<[number, number, boolean]>, color: string): string {
  if (points.length === 0) return ''
  const d = points.map(([x, y], i) => `${i === 0 ? 'M' : 'L'}${x.toFixed(1)},${y.toFixed(1)}`).join(' ')
  const dots = points.map(([x, y, hollow]) => `<circle cx="${x.toFixed(1)}" cy="${y.toFixed(1)}" r="4" fill="${hollow ? '#fff' : color}" stroke="${color}" stroke-width="1.5"/>`).join('')
  return `<path d="${d}" fill="none" stroke="${color}" stroke-width="2.5"/>${dots}`
}

function niceMax(v: number): number {
  const p = 10 ** Math.floor(Math.log10(v))
  for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= v) return m * p
  return 10 * p
}

function ticks(lo: number, hi: number): number[] {
  const raw = (hi - lo) / 5
  const p = 10 ** Math.floor(Math.log10(raw))
  const step = [1, 2, 2.5, 5, 10].map((m) => m * p).find((s) => s >= raw) ?? raw
  const out: number[] = []
  for (let v = lo; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(6)))
  return out
}

function fmt(v: number): string {
  if (v >= 1000) return `${Number((v / 1000).toPrecision(3))}k`
  return String(Number(v.toPrecision(3)))
}

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
}
