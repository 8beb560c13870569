#!/usr/bin/env node
// `npm test`: every test in one vitest run. The summary reporter prints
// `N passed, N failed, N skipped`; workerd can log a late line about a closed socket after it, so
// the summary is printed again when anything followed it, and the output always ends with it.
// The exit code is vitest's.
import { spawn } from 'node:child_process'

const SUMMARY = /^\d+ passed, \d+ failed, \d+ skipped$/
const args = ['vitest', 'run', ...process.argv.slice(2)]
const child = spawn('npx', args, { stdio: ['inherit', 'pipe', 'pipe'], env: { ...process.env, MALLOC_MMAP_MAX_: '0', MALLOC_TRIM_THRESHOLD_: '68719476736' } })

let summary
let after = false
const watch = (out) => (chunk) => {
  out.write(chunk)
  for (const line of chunk.toString('utf8').split('\n')) {
    if (line.trim() === '') continue
    if (SUMMARY.test(line.trim())) {
      summary = line.trim()
      after = false
    } else if (summary) after = true
  }
}
child.stdout.on('data', watch(process.stdout))
child.stderr.on('data', watch(process.stderr))
child.on('close', (code, signal) => {
  if (summary && after) process.stdout.write(`${summary}\n`)
  process.exit(code ?? (signal ? 1 : 0))
})
