#!/usr/bin/env node
// `npm run gpu-node`: generates the model MODEL_DIR names when it is a missing or stale preset
// (gpu-node/tools/generate-model/ensure-cli.ts; the node itself never generates), then runs
// gpu-node/src/main.ts in a child process whose environment carries the glibc malloc settings the
// engine needs. glibc reads MALLOC_* only when a process starts, so they cannot be set from JS
// inside the node process itself (shared/FACTS.md: 1.5–3× faster steps at large KV). Signals are
// forwarded so the node drains; the launcher exits with the node's code.
import { spawn, spawnSync } from 'node:child_process'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
const env = { ...process.env, MALLOC_MMAP_MAX_: '0', MALLOC_TRIM_THRESHOLD_: '68719476736' }
const ensured = spawnSync(process.execPath, ['--import', 'tsx', join(root, 'gpu-node/tools/generate-model/ensure-cli.ts')], { cwd: process.cwd(), env, stdio: 'inherit' })
if (ensured.status !== 0) process.exit(ensured.status ?? 1)
const child = spawn(process.execPath, ['--import', 'tsx', join(root, 'gpu-node/src/main.ts'), ...process.argv.slice(2)], {
  cwd: process.cwd(),
  env,
  stdio: 'inherit',
})

// One forward per signal received. A terminal's Ctrl-C also reaches the child directly (same
// process group); the node treats a quick repeat as the same drain.
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal)
  })
}

child.on('error', (e) => {
  process.stderr.write(`launch-gpu-node: could not start the node: ${e.message}\n`)
  process.exit(1)
})
child.on('exit', (code, signal) => {
  // Killed by a signal: report it the shell way (128 + signal number).
  if (code === null) process.exit(signal === 'SIGINT' ? 130 : signal === 'SIGTERM' ? 143 : 1)
  process.exit(code)
})
