/**
 * Resume attempts by outcome, per isolate (DESIGN.md §4 Resume): `resumed` (a node took the
 * continuation), `exhausted` (the stream failed again after MAX_RESUMES), `no_node` (no node
 * answered the continuation in time). Exposed on GET /v1/regions as `resumes`.
 */
import type { ResumeOutcome } from './resumable-body.ts'

class ResumeCounter {
  private readonly counts: Record<ResumeOutcome, number> = { resumed: 0, exhausted: 0, no_node: 0 }
  add(outcome: ResumeOutcome): void {
    this.counts[outcome]++
  }
  snapshot(): Readonly<Record<ResumeOutcome, number>> {
    return { ...this.counts }
  }
}

export const resumeCounter = new ResumeCounter()
