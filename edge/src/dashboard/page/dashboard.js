// @ts-check
/**
 * The /dashboard page: latency per node region over time (uPlot), the region and edge → region
 * tables (GET /v1/stats/latency) and the node table (GET /v1/regions), refreshed every 5 s.
 *
 * The token (ADMIN_TOKEN or an API key) lives in sessionStorage for this tab only and travels in
 * the Authorization header, never in a URL. Every value reaches the DOM through textContent
 * (region and node names come from configuration, but are never trusted as HTML).
 */
;(() => {
  const REFRESH_MS = 5000
  const TOKEN_KEY = 'zl-dashboard-token'
  const PALETTE = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#ca8a04', '#db2777']
  /** Line style per percentile: solid, dashed, dotted. */
  const PERCENTILES = /** @type {const} */ ([
    ['p50', undefined],
    ['p95', [6, 4]],
    ['p99', [2, 3]],
  ])
  /** Log scales cannot show 0: sub-0.1 ms values are drawn at 0.1 ms. */
  const MIN_DRAWN_MS = 0.1

  const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id))
  const tokenInput = /** @type {HTMLInputElement} */ ($('token'))
  const windowSelect = /** @type {HTMLSelectElement} */ ($('window'))
  const metricSelect = /** @type {HTMLSelectElement} */ ($('metric'))
  const status = $('status')
  const chartEl = $('chart')

  /** @type {string | null} */
  let token = sessionStorage.getItem(TOKEN_KEY)
  /** @type {any} */
  let lastStats = null
  /** @type {uPlot | null} */
  let plot = null
  /** Regions the current plot was built for (a different set rebuilds it). */
  let plotKey = ''
  /** @type {number | undefined} */
  let timer
  let generation = 0

  $('auth').addEventListener('submit', (e) => {
    e.preventDefault()
    const value = tokenInput.value.trim()
    tokenInput.value = ''
    if (!value) return
    token = value
    sessionStorage.setItem(TOKEN_KEY, value)
    showAuthState()
    void refresh()
  })
  $('forget').addEventListener('click', () => {
    token = null
    sessionStorage.removeItem(TOKEN_KEY)
    clearData()
    setStatus('Token forgotten.', false)
    showAuthState()
  })
  windowSelect.addEventListener('change', () => void refresh())
  metricSelect.addEventListener('change', () => lastStats && drawChart(lastStats))
  document.addEventListener('visibilitychange', () => document.visibilityState === 'visible' && void refresh())
  window.addEventListener('resize', () => plot && plot.setSize(chartSize()))

  showAuthState()
  if (token) void refresh()

  /** One refresh of everything; a newer one (or a change of token) makes an older one's answer moot. */
  async function refresh() {
    clearTimeout(timer)
    const mine = ++generation
    if (!token) return
    try {
      const auth = { authorization: `Bearer ${token}` }
      const windowParam = encodeURIComponent(windowSelect.value)
      const [stats, regions] = await Promise.all([
        getJson(`/v1/stats/latency?window=${windowParam}`, auth),
        getJson('/v1/regions', auth),
      ])
      if (mine !== generation) return
      lastStats = stats
      drawChart(stats)
      fillLatencyTable('regions', stats.regions, false)
      fillLatencyTable('pairs', stats.pairs, true)
      fillNodeTable(regions)
      $('scope').textContent = stats.scope === 'all' ? 'all tenants' : `tenant ${stats.tenant}`
      const points = stats.resolution === 'minute' ? 'one point per minute' : 'one point per hour'
      setStatus(`Updated ${new Date().toLocaleTimeString()} · last ${stats.window}, ${points}`, false)
    } catch (e) {
      if (mine !== generation) return
      const err = /** @type {Error & { status?: number }} */ (e)
      if (err.status === 401 || err.status === 403) {
        token = null
        sessionStorage.removeItem(TOKEN_KEY)
        clearData()
        showAuthState()
        setStatus('The token was rejected: enter the admin token or a valid API key.', true)
        return
      }
      setStatus(`Refresh failed: ${err.message}. Retrying…`, true)
    }
    if (mine === generation) timer = window.setTimeout(() => void refresh(), REFRESH_MS)
  }

  /**
   * @param {string} url
   * @param {Record<string, string>} headers
   */
  async function getJson(url, headers) {
    const res = await fetch(url, { headers, cache: 'no-store', credentials: 'omit' })
    if (!res.ok) {
      const body = await res.json().catch(() => null)
      const message = body?.error?.message ?? `HTTP ${res.status}`
      throw Object.assign(new Error(message), { status: res.status })
    }
    return res.json()
  }

  /** @param {any} stats */
  function drawChart(stats) {
    const metric = metricSelect.value === 'totalMs' ? 'totalMs' : 'ttfbMs'
    /** @type {Array<{ region: string; ttfbMs: any; totalMs: any }>} */
    const regions = stats.series.regions
    $('chart-empty').hidden = regions.length > 0
    const key = `${metric}|${regions.map((r) => r.region).join(',')}`
    /** @type {uPlot.AlignedData} */
    const data = [stats.series.timestamps]
    for (const r of regions) for (const [p] of PERCENTILES) data.push(r[metric][p].map(clampForLog))
    if (plot && key === plotKey) {
      plot.setData(data)
    } else {
      plot?.destroy()
      plot = regions.length === 0 ? null : new uPlot(chartOptions(regions.map((r) => r.region), metric), data, chartEl)
      plotKey = key
    }
    chartEl.dataset.regions = regions.map((r) => r.region).join(',')
  }

  /**
   * @param {string[]} regions
   * @param {'ttfbMs' | 'totalMs'} metric
   * @returns {uPlot.Options}
   */
  function chartOptions(regions, metric) {
    /** @type {uPlot.Series[]} */
    const series = [{ label: 'time' }]
    regions.forEach((region, i) => {
      for (const [p, dash] of PERCENTILES) {
        series.push({
          label: `${region} ${p}`,
          stroke: colorOf(i),
          width: p === 'p50' ? 2 : 1.5,
          ...(dash ? { dash: [...dash] } : {}),
          spanGaps: false,
          points: { size: 5 },
          value: (_u, v) => (v == null ? '–' : `${formatMs(v)} ms`),
        })
      }
    })
    return {
      ...chartSize(),
      series,
      scales: { y: { distr: 3 } },
      axes: [{}, { label: metric === 'ttfbMs' ? 'time to first byte (ms)' : 'total duration (ms)', size: 70 }],
      legend: { live: true },
      cursor: { drag: { x: true, y: false } },
    }
  }

  function chartSize() {
    return { width: Math.max(320, chartEl.clientWidth || 900), height: 300 }
  }

  /**
   * @param {'regions' | 'pairs'} id
   * @param {any[]} rows
   * @param {boolean} withEdge
   */
  function fillLatencyTable(id, rows, withEdge) {
    const body = /** @type {HTMLTableSectionElement} */ ($(id).querySelector('tbody'))
    const named = (lastStats?.series.regions ?? []).map((/** @type {{ region: string }} */ r) => r.region)
    body.replaceChildren(
      ...rows.map((row) => {
        const tr = document.createElement('tr')
        tr.dataset.region = row.region ?? ''
        if (withEdge) {
          tr.dataset.edge = row.edge
          tr.append(cell(row.edge, 'name'))
        }
        const regionCell = cell(row.region ?? 'no node (refused at the edge)', row.region ? 'name' : 'name none')
        const idx = named.indexOf(row.region)
        if (idx >= 0) {
          const swatch = document.createElement('span')
          swatch.className = 'swatch'
          swatch.style.backgroundColor = colorOf(idx)
          regionCell.prepend(swatch)
        }
        tr.append(
          regionCell,
          cell(String(row.requests), 'requests'),
          cell(row.requestsPerSec.toFixed(row.requestsPerSec >= 10 ? 1 : 3)),
          cell(`${(row.errorRate * 100).toFixed(1)}%`, row.errorRate > 0.01 ? 'rate-bad' : ''),
          ...['ttfbMs', 'totalMs'].flatMap((m) => ['p50', 'p95', 'p99'].map((p) => cell(row[m][p] == null ? '–' : formatMs(row[m][p])))),
        )
        return tr
      }),
    )
  }

  /** @param {any} table the /v1/regions answer */
  function fillNodeTable(table) {
    const body = /** @type {HTMLTableSectionElement} */ ($('nodes').querySelector('tbody'))
    const now = Date.now()
    body.replaceChildren(
      ...table.nodes.map((/** @type {any} */ n) => {
        const tr = document.createElement('tr')
        tr.dataset.node = n.id
        const [state, cls] = n.down ? ['down', 'state-bad'] : !n.fresh ? ['stale', 'state-bad'] : n.draining ? ['draining', 'state-warn'] : ['serving', 'state-ok']
        const hasLoad = typeof n.running === 'number' && typeof n.maxBatch === 'number' && n.maxBatch > 0
        tr.append(
          cell(n.id, 'name'),
          cell(n.region, 'name'),
          cell(state, cls),
          cell(hasLoad ? `${n.running} / ${n.maxBatch}` : '–'),
          cell(hasLoad ? `${Math.round((100 * n.running) / n.maxBatch)}%` : '–'),
          cell(typeof n.waiting === 'number' ? String(n.waiting) : '–'),
          cell(typeof n.kvUsedFrac === 'number' ? `${(100 * n.kvUsedFrac).toFixed(1)}%` : '–'),
          cell(typeof n.tokPerSec === 'number' ? n.tokPerSec.toFixed(0) : '–'),
          cell(typeof n.prefixHitRate === 'number' ? `${(100 * n.prefixHitRate).toFixed(0)}%` : '–'),
          cell(n.ageMs == null ? 'static' : `${(n.ageMs / 1000).toFixed(1)} s ago`),
        )
        return tr
      }),
    )
    $('nodes-caption').textContent = `as edge ${table.edge} sees them (${table.source}) · ${new Date(now).toLocaleTimeString()}`
  }

  /**
   * @param {string} text
   * @param {string} [className]
   */
  function cell(text, className) {
    const td = document.createElement('td')
    td.textContent = text
    if (className) td.className = className
    return td
  }

  function clearData() {
    lastStats = null
    plot?.destroy()
    plot = null
    plotKey = ''
    delete chartEl.dataset.regions
    for (const id of ['regions', 'pairs', 'nodes']) $(id).querySelector('tbody')?.replaceChildren()
    $('scope').textContent = ''
    $('nodes-caption').textContent = ''
  }

  function showAuthState() {
    $('forget').hidden = !token
    tokenInput.placeholder = token ? 'connected · enter another to switch' : 'zl-…'
  }

  /**
   * @param {string} text
   * @param {boolean} isError
   */
  function setStatus(text, isError) {
    status.textContent = text
    status.classList.toggle('error', isError)
  }

  /** @param {number} i */
  function colorOf(i) {
    return PALETTE[i % PALETTE.length]
  }

  /** @param {number | null} v */
  function clampForLog(v) {
    return v == null ? null : Math.max(v, MIN_DRAWN_MS)
  }

  /** @param {number} ms */
  function formatMs(ms) {
    return ms >= 100 ? ms.toFixed(0) : ms >= 10 ? ms.toFixed(1) : ms.toFixed(2)
  }
})()
