import { ApiError } from './api-error.ts'

/**
 * Priority classes (README "Priority"): an API key is `interactive` (the default) or `batch`, and
 * a request may lower its own priority, never raise it above its key's. The edge sends the node
 * one number, `x-zl-priority` (lower runs first), which orders the node's queue, its prefill and
 * preemption, and which request a full queue refuses (gpu-node/src/engine/README.md).
 */

export const PRIORITY_CLASSES = ['interactive', 'batch'] as const
export type PriorityClass = (typeof PRIORITY_CLASSES)[number]

/** Where each class's numbers start: every batch number runs after every interactive one. */
export const CLASS_PRIORITY: Readonly<Record<PriorityClass, number>> = { interactive: 0, batch: 1000 }

const MAX_PRIORITY = 1_000_000

/** The client's header (any dialect): a class name or a whole number 0–1000000 (vLLM's `priority`: lower first). */
export const PRIORITY_HEADER = 'x-zl-priority'

export const isPriorityClass = (v: unknown): v is PriorityClass => (PRIORITY_CLASSES as readonly unknown[]).includes(v)

/** The priority a request asked for in its header; undefined when absent; a 400 naming the header when malformed. */
export function parsePriorityAsk(value: string | null | undefined): number | undefined {
  if (value === null || value === undefined) return undefined
  if (isPriorityClass(value)) return CLASS_PRIORITY[value]
  if (/^\d{1,7}$/.test(value) && Number(value) <= MAX_PRIORITY) return Number(value)
  throw new ApiError('invalid_request', `The ${PRIORITY_HEADER} header must be 'interactive', 'batch' or a whole number from 0 to ${MAX_PRIORITY} (lower runs first).`, { param: PRIORITY_HEADER })
}

/** Of a request's asks (its header, vLLM's body `priority`), the one that runs it last; undefined when it made none. */
export function lowestAsk(...asks: Array<number | undefined>): number | undefined {
  const made = asks.filter((a): a is number => a !== undefined)
  return made.length > 0 ? Math.max(...made) : undefined
}

/** The number the node gets: the request's ask, never ahead of its key's class. */
export function effectivePriority(keyClass: PriorityClass, ask: number | undefined): number {
  return Math.max(CLASS_PRIORITY[keyClass], ask ?? CLASS_PRIORITY[keyClass])
}
