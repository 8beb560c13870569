/**
 * The self-hosted edge as it runs (`npm run edge:node`, `npm start -- --edge node`, the bench):
 * edge/src/entries/node.ts and everything it imports bundled by esbuild into ONE ES module,
 * `node.mjs`, with its source map beside it. The dashboard's files travel inside it as text, as
 * they do in the Worker (dashboard/bundled-assets.ts stands in for file-assets.ts, which reads
 * them from the source tree), so the file runs on its own: `node node.mjs`.
 * `npx tsx infra/build/edge-node.ts [outDir]` builds into dist/edge-node.
 *
 * Why a build rather than running the sources through tsx: tsx compiles every module with
 * esbuild's keepNames, which wraps each function expression in `__name(fn, "name")`, an
 * Object.defineProperty on every closure the code makes. The request path makes dozens per
 * request: 6.2 % of the edge's CPU profile at c64 on one core went to __name, and the edge's CPU
 * per request was 0.30-0.42 ms under tsx against 0.24-0.28 ms bundled, in the same scratch runs
 * (docs/PERFORMANCE.md, "The Node edge runs as a bundle"). A plain bundle keeps function names
 * (nothing is minified) and stack traces map back with `node --enable-source-maps`.
 */
import { mkdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { readFile } from 'node:fs/promises'
import { build, type Plugin } from 'esbuild'

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
const DASHBOARD = join(ROOT, 'edge', 'src', 'dashboard')

/** The files bundled-assets.ts imports as text (wrangler.toml's [[rules]] say the same to wrangler). */
const DASHBOARD_TEXT = /(\/page\/(index\.html|dashboard\.js|dashboard\.css)|\/uPlot\.iife\.min\.js|\/uPlot\.min\.css)$/

/** file-assets.ts's readDashboardAssets, answered from the bundle's own copy of the files. */
const dashboardInside: Plugin = {
  name: 'dashboard-inside',
  setup(b) {
    b.onResolve({ filter: /\/file-assets\.ts$/ }, () => ({ path: 'file-assets', namespace: 'dashboard-inside' }))
    b.onLoad({ filter: /.*/, namespace: 'dashboard-inside' }, () => ({
      contents: "import { BUNDLED_DASHBOARD_ASSETS } from './bundled-assets.ts'\nexport const readDashboardAssets = () => BUNDLED_DASHBOARD_ASSETS\n",
      resolveDir: DASHBOARD,
      loader: 'ts',
    }))
    b.onLoad({ filter: DASHBOARD_TEXT }, async (args) => ({ contents: await readFile(args.path, 'utf8'), loader: 'text' }))
  },
}

/** Where `npm run edge:node` builds and runs it. */
export const NODE_EDGE_DIR = join(ROOT, 'dist', 'edge-node')

/** Builds the Node edge into `outDir` (created if missing); returns the module to run. */
export async function buildNodeEdge(outDir: string = NODE_EDGE_DIR): Promise<string> {
  const outfile = join(outDir, 'node.mjs')
  mkdirSync(outDir, { recursive: true })
  await build({
    entryPoints: [join(ROOT, 'edge', 'src', 'entries', 'node.ts')],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    sourcemap: true,
    logLevel: 'warning',
    plugins: [dashboardInside],
    // CommonJS dependencies (undici) inside an ES module bundle call require(): give them one.
    banner: { js: "import { createRequire as __zlRequire } from 'node:module'; const require = __zlRequire(import.meta.url);" },
  })
  return outfile
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  console.log(await buildNodeEdge(process.argv[2] ?? NODE_EDGE_DIR))
}
