import { describe, expect, it } from 'vitest'
import { EXPLORE_EVERY, Speculation, StepCosts, sizeClass, type DraftRow } from './speculation.ts'

/** A running row: its tokens (prompt and output), `generated` of them output, up to maxTokens. */
function row(seqId: number, tokens: number[], maxTokens = 100, generated = 1): DraftRow {
  return { seqId, tokens, generated, req: { maxTokens } }
}

/** Step costs with these steps measured: [rows, width, ms] each. */
function costs(...steps: Array<[number, number, number]>): StepCosts {
  const c = new StepCosts()
  for (const [rows, width, ms] of steps) c.observe(rows, width, ms)
  return c
}

/** A row whose tokens repeat with period 4: prompt lookup drafts its next ones. */
const looping = (seqId: number, maxTokens?: number) => row(seqId, [1, 2, 3, 4, 1, 2, 3, 4, 1, 2], maxTokens)

describe('step costs', () => {
  it('knows nothing of a batch size before its plain step was measured; then a verify step costs a plain one', () => {
    const c = new StepCosts()
    expect(c.plain(4)).toBeUndefined()
    expect(c.verify(4, 3)).toBeUndefined()
    c.observe(4, 1, 10)
    expect(c.plain(4)).toBe(10)
    expect(c.verify(4, 3)).toBe(10)
    expect(c.measured(4)).toBe(false)
  })

  it('keeps costs per row within a size class, smoothed over measurements', () => {
    expect([1, 2, 3, 4, 5, 8, 9, 32].map(sizeClass)).toEqual([1, 2, 4, 4, 8, 8, 16, 32])
    const c = costs([3, 1, 6])
    expect(c.plain(4)).toBe(8)
    c.observe(4, 3, 20)
    c.observe(4, 3, 40)
    expect(c.verify(3, 3)).toBeCloseTo(3 * 6.5, 6)
    expect(c.measured(3)).toBe(true)
  })

  it('from one width measured in the class, keeps its cost for a narrower one and grows it as the square root for a wider one', () => {
    const c = costs([1, 1, 3], [1, 4, 4])
    expect(c.verify(1, 2)).toBe(4)
    expect(c.verify(1, 16)).toBeCloseTo(8, 6)
  })

  it('never estimates a verify step below a plain one', () => {
    const c = costs([2, 1, 10], [2, 3, 8])
    expect(c.verify(2, 3)).toBe(10)
  })

  it('draws a line through the two nearest measured widths, never below a narrower one', () => {
    const c = costs([1, 1, 3], [1, 2, 4], [1, 4, 6])
    expect(c.verify(1, 3)).toBeCloseTo(5, 6)
    expect(c.verify(1, 6)).toBeCloseTo(8, 6)
    const noisy = costs([1, 1, 3], [1, 2, 6], [1, 4, 5])
    expect(noisy.verify(1, 6)).toBe(6)
  })

  it('gives a class with no verify step the ratio of the largest smaller class that has one', () => {
    const c = costs([1, 1, 4], [1, 3, 6], [4, 1, 4], [4, 3, 12], [16, 1, 16])
    // Class 16 borrows class 4's ratio (3×), not class 1's (1.5×); class 1 nothing from above.
    expect(c.verify(16, 3)).toBeCloseTo(48, 6)
    const above = costs([1, 1, 4], [16, 1, 16], [16, 3, 80])
    expect(above.verify(1, 3)).toBe(4)
  })
})

describe('speculation policy', () => {
  it('`on` drafts every row prompt lookup finds a draft for, up to maxDraft, the row’s max_tokens and the width the budget leaves', () => {
    const spec = new Speculation({ mode: 'on', maxDraft: 3 })
    const rows = [looping(1), row(2, [5, 6, 7]), looping(3, 3)]
    expect(spec.plan(rows, 100)).toEqual([
      { seqId: 1, tokens: [3, 4, 1] },
      // Row 3 has generated 1 of 3: its next token and one draft token end it.
      { seqId: 3, tokens: [3] },
    ])
    expect(spec.plan([looping(1)], 3)).toEqual([{ seqId: 1, tokens: [3, 4] }])
    expect(spec.plan([looping(1)], 1)).toEqual([])
  })

  it('`off` never drafts', () => {
    expect(new Speculation({ mode: 'off', maxDraft: 4 }).plan([looping(1)], 100)).toEqual([])
  })

  it('`auto` measures a plain step first, then tries a verify step at its cheapest width, then decides by what it measured', () => {
    const spec = new Speculation({ mode: 'auto', maxDraft: 4 })
    expect(spec.plan([looping(1)], 100)).toEqual([])
    spec.observeStep(1, 1, 4)
    expect(spec.plan([looping(1)], 100)).toEqual([{ seqId: 1, tokens: [3] }])
    spec.observeStep(1, 2, 4.4)
    spec.observeRow(1, 1, 1)
    expect(spec.plan([looping(1)], 100)).toEqual([{ seqId: 1, tokens: [3, 4, 1, 2] }])
    spec.observeStep(1, 5, 40)
    expect(spec.plan([looping(1)], 100)).toEqual([{ seqId: 1, tokens: [3] }])
    spec.observeStep(1, 2, 40)
    expect(spec.plan([looping(1)], 100)).toEqual([])
  })

  it('`auto` drafts where a verify step is about as cheap as a plain one and drafts are accepted', () => {
    const spec = new Speculation({ mode: 'auto', maxDraft: 4 })
    spec.observeStep(1, 1, 4)
    spec.observeStep(1, 5, 6)
    spec.observeRow(1, 4, 4)
    expect(spec.plan([looping(1)], 100)).toEqual([{ seqId: 1, tokens: [3, 4, 1, 2] }])
  })

  it('`auto` stays off where a verify step costs about its tokens (a large batch), until it is due to measure again', () => {
    const spec = new Speculation({ mode: 'auto', maxDraft: 4 })
    const rows = Array.from({ length: 32 }, (_, i) => looping(i))
    spec.observeStep(32, 1, 10)
    spec.observeStep(32, 5, 50)
    expect(spec.plan(rows, 100)).toEqual([])
    // A width-2 step is taken to cost what the width-5 one did, 5 plain steps: 4 extra, at 0.5 %
    // of the class's time every 800 steps.
    for (let i = 0; i < 799; i++) spec.observeStep(32, 1, 10)
    expect(spec.plan(rows, 100)).toEqual([])
    spec.observeStep(32, 1, 10)
    // Due: its cheapest verify step, one draft token per row.
    expect(spec.plan(rows, 100).map((d) => d.tokens.length)).toEqual(rows.map(() => 1))
  })

  it('`auto` at batch 1, where a verify step costs little more than a plain one, measures again within dozens of steps, at most every EXPLORE_EVERY', () => {
    const spec = new Speculation({ mode: 'auto', maxDraft: 4 })
    spec.observeStep(1, 1, 4)
    expect(spec.plan([looping(1)], 100)).toEqual([{ seqId: 1, tokens: [3] }])
    spec.observeStep(1, 2, 4.4)
    // Its first drafts refused (a request's opening words copy nothing): speculation stops.
    for (let i = 0; i < 3; i++) spec.observeRow(1, 1, 0)
    expect(spec.plan([looping(1)], 100)).toEqual([])
    // 0.4 ms extra over 4: due after 20 plain steps, and its drafts are then measured again.
    for (let i = 0; i < 19; i++) spec.observeStep(1, 1, 4)
    expect(spec.plan([looping(1)], 100)).toEqual([])
    spec.observeStep(1, 1, 4)
    expect(spec.plan([looping(1)], 100)).toEqual([{ seqId: 1, tokens: [3] }])
    // A verify step dearer than the cap allows for still is measured again every EXPLORE_EVERY.
    const dear = new Speculation({ mode: 'auto', maxDraft: 4 })
    dear.observeStep(1, 1, 4)
    dear.observeStep(1, 2, 40)
    for (let i = 0; i < EXPLORE_EVERY - 1; i++) dear.observeStep(1, 1, 4)
    expect(dear.plan([looping(1)], 100)).toEqual([])
    dear.observeStep(1, 1, 4)
    expect(dear.plan([looping(1)], 100)).toEqual([{ seqId: 1, tokens: [3] }])
  })

  it('`auto` stops drafting rows whose drafts are refused, and fresh rows whose drafts come from matches as long', () => {
    const spec = new Speculation({ mode: 'auto', maxDraft: 4 })
    spec.observeStep(1, 1, 4)
    spec.observeStep(1, 2, 4.6)
    spec.observeStep(1, 5, 5)
    expect(spec.plan([looping(1)], 100).length).toBe(1)
    for (let i = 0; i < 6; i++) spec.observeRow(1, 4, 0)
    expect(spec.plan([looping(1)], 100)).toEqual([])
    // A new row drafting from a 4-token match as row 1 did starts from that acceptance.
    expect(spec.plan([looping(2)], 100)).toEqual([])
    // One drafting from a one-token match does not.
    expect(spec.plan([row(3, [5, 9, 9, 9, 5])], 100)).toEqual([{ seqId: 3, tokens: [9, 9, 9, 5] }])
    expect(spec.stats).toEqual({ steps: 2, drafts: 6, draftTokens: 24, acceptedTokens: 0 })
  })

  it('`auto` tries a row again once its refusals have faded over steps without a verify, when drafts like its own are accepted', () => {
    const spec = new Speculation({ mode: 'auto', maxDraft: 4 })
    spec.observeStep(1, 1, 4)
    spec.observeStep(1, 5, 8)
    // Drafts from 4-token matches have been accepted (another row's), then this row's are refused.
    for (let i = 0; i < 8; i++) {
      spec.plan([looping(3)], 100)
      spec.observeRow(3, 4, 4)
    }
    expect(spec.plan([looping(1)], 100).length).toBe(1)
    for (let i = 0; i < 3; i++) {
      spec.plan([looping(1)], 100)
      spec.observeRow(1, 4, 0)
    }
    expect(spec.plan([looping(1)], 100)).toEqual([])
    let steps = 1
    while (spec.plan([looping(1)], 100).length === 0) steps++
    expect(steps).toBeGreaterThan(0)
    expect(steps).toBeLessThan(10)
  })

  it('`auto` verifies nothing while the tick prefills or requests wait; `on` still does', () => {
    const auto = new Speculation({ mode: 'auto', maxDraft: 4 })
    auto.observeStep(1, 1, 4)
    auto.observeStep(1, 5, 4.4)
    expect(auto.plan([looping(1)], 100, true)).toEqual([])
    expect(auto.plan([looping(1)], 100, false)).toHaveLength(1)
    expect(new Speculation({ mode: 'on', maxDraft: 4 }).plan([looping(1)], 100, true)).toHaveLength(1)
  })

  it('counts what was proposed and accepted, as vLLM’s metrics do', () => {
    const spec = new Speculation({ mode: 'on', maxDraft: 4 })
    spec.observeStep(1, 5, 4)
    spec.observeRow(1, 4, 3)
    spec.observeRow(2, 2, 2)
    expect(spec.stats).toEqual({ steps: 1, drafts: 2, draftTokens: 6, acceptedTokens: 5 })
  })
})
