#!/usr/bin/env node
// `npm test`: every test in one vitest run. The summary reporter ends the output with
// `N passed, N failed, N skipped`; the exit code is vitest's.
import { spawnSync } from 'node:child_process'

const args = ['vitest', 'run', ...process.argv.slice(2)]
const res = spawnSync('npx', args, { stdio: 'inherit', env: { ...process.env, MALLOC_MMAP_MAX_: '0', MALLOC_TRIM_THRESHOLD_: '68719476736' } })
process.exit(res.status ?? 1)
