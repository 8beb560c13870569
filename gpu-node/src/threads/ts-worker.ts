import { Worker } from 'node:worker_threads'

/**
 * Starts a worker whose entry is TypeScript: register tsx's ESM loader inside it, then import
 * (Node 20 does not pass `--import` loaders on to worker threads).
 */
export function spawnTsWorker(entry: URL, workerData: unknown): Worker {
  const tsx = import.meta.resolve('tsx/esm/api')
  const boot = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(entry.href)}) })`
  return new Worker(boot, { eval: true, workerData })
}
