/**
 * An answer's choices (OpenAI `n`): the engine requests that make them, and their finishes
 * gathered into the one usage the response reports.
 */
import { randomUUID } from 'node:crypto'
import type { Usage } from '../../../shared/src/generation.ts'
import type { EngineRequest } from '../engine/types.ts'

/**
 * The engine requests of `n` choices: the first as asked, each other after it (the engine forks
 * them from its prefill) with its own seed when the request fixed one (seed + i), so a seeded
 * request's n choices differ from each other and are the same every time.
 */
export function choiceRequests(first: EngineRequest, n: number, inFlight: ReadonlySet<string>): EngineRequest[] {
  const reqs = [first]
  for (let i = 1; i < n; i++) {
    const seed = first.sampling.seed
    const sampling = seed === undefined ? first.sampling : { ...first.sampling, seed: (seed + i) % 2 ** 32 }
    reqs.push({ ...first, id: uniqueId(`${first.id}.${i}`, inFlight), sampling, after: first.id })
  }
  return reqs
}

/** The choices' finishes as they come: usage summed over them (the prompt counted once, as OpenAI counts `n`). */
export class Ended {
  private count = 0
  private usage: Usage | undefined
  constructor(private readonly choices: number) {}

  get all(): boolean {
    return this.count === this.choices
  }

  /** Adds a choice's usage; returns the total so far. */
  add(usage: Usage): Usage {
    this.count++
    this.usage = this.usage ? { ...this.usage, completionTokens: this.usage.completionTokens + usage.completionTokens } : usage
    return this.usage
  }
}

/** `id`, or a variant of it no request in flight has. */
export function uniqueId(requestId: string, inFlight: ReadonlySet<string>): string {
  return inFlight.has(requestId) ? `${requestId}~${randomUUID()}` : requestId
}
