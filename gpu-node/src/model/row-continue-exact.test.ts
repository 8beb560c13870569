import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { API_SAMPLING_DEFAULTS, GREEDY } from '../../../shared/src/generation.ts'
import { openEditedEngine, type EditedEngineOptions } from '../../test/support/edited-engine.ts'
import { generateModel } from '../../tools/generate-model/generate-model.ts'
import type { Engine } from '../engine/engine.ts'
import type { EngineEvent, EngineRequest, Usage } from '../engine/types.ts'
import { DEFAULT_MODEL_DIR } from '../config.ts'
import { readModelDir, type ModelDir } from './model-dir.ts'
import type { StepPlan } from './runner.ts'
import { ModelTokenizer } from './tokenizer.ts'

/**
 * A request that continues a batch row past the prefix cache's last whole block must give the
 * tokens it gives alone with no cache: an editor's keystrokes, each request superseding the last.
 * With the predecessor released in the same tick its row is taken over (cut to the shared tokens,
 * the rest of the prompt fed by the decode step); with the predecessor still running its row's
 * shared tokens are copied (a donor): into a new row the decode step feeds the rest (a restore),
 * or, on the concat path, into a prefill of the rest. Greedy and seeded, on a
 * learned-position graph, a RoPE graph, the trained default model, and the concat KV path (donor
 * copies only). Each case checks that the path it proves was taken. The controls cut a taken-over
 * row one token short, or copy one token too few from a donor, prompts unchanged: both must change
 * the texts.
 */
const BLOCK = 8
const LIMITS = { prefillChunkTokens: 16, prefixCacheBytes: 1 << 24, prefixBlockTokens: BLOCK }
const LINES = 'import os\nimport sys\n\n\ndef read_config(path):\n    """Reads the settings file at path."""\n    with open(path) as f:\n        return f.read()\n\n\n'

/** Keystrokes: the file, then a function name and its arguments typed one character at a time. */
function keystrokes(dir: ModelDir, seeded: boolean): EngineRequest[] {
  const tok = new ModelTokenizer(dir)
  const typed = ['def parse(p', 'def parse(pa', 'def parse(pat', 'def parse(path', 'def parse(path,', 'def parse(path, m']
  const sampling = (i: number) => (seeded ? { ...API_SAMPLING_DEFAULTS, temperature: 0.8, topP: 0.95, seed: 90 + i } : GREEDY)
  return typed.map((t, i) => ({ id: `k${i}`, promptTokens: tok.encodeText(LINES + t), maxTokens: 12, stop: [], sampling: sampling(i), priority: 0, ignoreEos: true }))
}

interface Outcome {
  text: string
  usage?: Usage
}

/** Each request alone, on an engine without the prefix cache. */
async function alone(dir: ModelDir, reqs: EngineRequest[], opts: EditedEngineOptions): Promise<string[]> {
  const { engine } = await openEditedEngine(dir, { ...opts, limits: { prefillChunkTokens: 16 } })
  const out: string[] = []
  for (const r of reqs) out.push((await finished(engine, r)).text)
  await engine.close()
  return out
}

function finished(engine: Engine, req: EngineRequest, onText?: (n: number) => void): Promise<Outcome> {
  let text = ''
  let texts = 0
  return new Promise((resolve, reject) => {
    const r = engine.submit(req, (e: EngineEvent) => {
      if (e.type === 'text') {
        text += e.text
        onText?.(++texts)
      } else if (e.error) reject(new Error(`${req.id}: ${e.error.code}`))
      else resolve({ text, usage: e.usage })
    })
    if (!r.ok) reject(new Error(r.code))
  })
}

/**
 * Each request submitted once its predecessor has sent two texts; `supersede` aborts the
 * predecessor in the same moment (the x-zl-supersede route does it the same way). Superseded
 * requests give the text they sent before their abort; the rest run to their end.
 */
async function typed(engine: Engine, reqs: EngineRequest[], supersede: boolean): Promise<Outcome[]> {
  const outcomes: Array<Promise<Outcome>> = []
  await new Promise<void>((done) => {
    const send = (i: number) => {
      let sent = false
      let text = ''
      const next = (n: number) => {
        if (n < 2 || sent || i + 1 >= reqs.length) return
        sent = true
        send(i + 1)
        if (supersede) engine.abort(reqs[i]!.id)
      }
      outcomes[i] = new Promise<Outcome>((resolve, reject) => {
        const r = engine.submit(reqs[i]!, (e: EngineEvent) => {
          if (e.type === 'text') {
            text += e.text
            next(++texts)
          } else if (e.error && e.error.code !== 'aborted') reject(new Error(`${reqs[i]!.id}: ${e.error.code}`))
          else resolve({ text, usage: e.type === 'finish' ? e.usage : undefined })
        })
        if (!r.ok) reject(new Error(r.code))
      })
      let texts = 0
      if (i + 1 >= reqs.length) void outcomes[i]!.then(() => done(), () => done())
    }
    send(0)
  })
  return Promise.all(outcomes)
}

/** The plans' takeovers and donor copies (prefill starts' and restores'), counted. */
function counting() {
  const seen = { takeovers: 0, donors: 0 }
  const rewrite = (plan: StepPlan): StepPlan => {
    seen.takeovers += plan.takeover?.length ?? 0
    seen.donors += plan.prefill.filter((p) => p.start?.donor).length + (plan.restore ?? []).filter((r) => r.donor).length
    return plan
  }
  return { seen, rewrite }
}

const root = mkdtempSync(join(tmpdir(), 'zerolayer-row-continue-'))
beforeAll(async () => {
  await generateModel({ preset: 'tiny', outDir: join(root, 'tiny'), seed: 42, kvCache: 'slots' })
  await generateModel({ preset: 'tiny-llama', outDir: join(root, 'tiny-llama'), seed: 42, kvCache: 'slots' })
  await generateModel({ preset: 'tiny', outDir: join(root, 'tiny-concat'), seed: 42, kvCache: 'concat' })
}, 60_000)
afterAll(() => rmSync(root, { recursive: true, force: true }))

const cases: Array<[string, () => ModelDir, EditedEngineOptions]> = [
  ['a learned-position graph (tiny)', () => readModelDir(join(root, 'tiny')), {}],
  ['a RoPE graph (tiny-llama)', () => readModelDir(join(root, 'tiny-llama')), {}],
  ['the trained default model (zl-code)', () => readModelDir(DEFAULT_MODEL_DIR), {}],
]

for (const [name, dirOf, opts] of cases) {
  describe(`a request continuing a batch row on ${name}`, () => {
    for (const seeded of [false, true]) {
      it(`takes over a superseded row, or copies a running one, with the texts it has alone (${seeded ? 'seeded' : 'greedy'})`, async () => {
        const dir = dirOf()
        const reqs = keystrokes(dir, seeded)
        const reference = await alone(dir, reqs, opts)
        expect(reference.every((t) => t.length > 0)).toBe(true)

        const superseding = counting()
        const s = await openEditedEngine(dir, { ...opts, limits: LIMITS, rewrite: superseding.rewrite })
        const superseded = await typed(s.engine, reqs, true)
        // The last one ran to its end; every other stopped after its own first texts.
        expect(superseded.at(-1)!.text).toBe(reference.at(-1))
        superseded.forEach((o, i) => expect(reference[i]!.startsWith(o.text)).toBe(true))
        expect(superseding.seen.takeovers).toBeGreaterThan(0)
        // A taken-over row keeps tokens past the last whole block: more than the cache alone gives.
        expect(superseded.some((o) => (o.usage?.cachedTokens ?? 0) % BLOCK !== 0)).toBe(true)
        await s.engine.close()

        const running = counting()
        const r = await openEditedEngine(dir, { ...opts, limits: LIMITS, rewrite: running.rewrite })
        expect((await typed(r.engine, reqs, false)).map((o) => o.text)).toEqual(reference)
        expect(running.seen.donors).toBeGreaterThan(0)
        await r.engine.close()
      })
    }
  })
}

/**
 * Files opened (each completed, the batch emptied), then typed in: each keystroke's prompt
 * continues its file's cached blocks, restored as a new row that the decode step feeds the rest
 * (Restore) — into the emptied batch's kept buffers, and beside a row still running. `files`
 * requests per phase, all at once.
 */
async function openThenType(engine: Engine, dir: ModelDir, seeded: boolean): Promise<string[]> {
  const tok = new ModelTokenizer(dir)
  const sampling = (i: number) => (seeded ? { ...API_SAMPLING_DEFAULTS, temperature: 0.8, topP: 0.95, seed: 40 + i } : GREEDY)
  const req = (id: string, text: string, i: number, maxTokens = 12): EngineRequest => ({ id, promptTokens: tok.encodeText(text), maxTokens, stop: [], sampling: sampling(i), priority: 0, ignoreEos: true })
  const files = ['# a\n', '# bb\n', '# ccc\n'].map((head) => head + LINES)
  const out: string[] = []
  const all = (reqs: EngineRequest[]) => Promise.all(reqs.map((r) => finished(engine, r))).then((o) => out.push(...o.map((x) => x.text)))
  await all(files.map((f, i) => req(`open${i}`, f, i)))
  await all(files.map((f, i) => req(`type${i}`, `${f}def parse(p`, 10 + i)))
  // Beside a long answer still running: its row decodes one token a step while the others are fed.
  const long = finished(engine, req('long', `${files[0]}class Config:\n`, 20, 40))
  await new Promise<void>((resolve) => {
    const r = engine.submit(req('first-text', `${files[1]}import re\n`, 21, 1), (e) => e.type === 'finish' && resolve())
    if (!r.ok) resolve()
  })
  await all(files.map((f, i) => req(`more${i}`, `${f}def parse(pa`, 30 + i)))
  out.push((await long).text)
  return out
}

/** openThenType's texts on an engine without the prefix cache. */
async function openThenTypeUncached(dir: ModelDir, seeded: boolean, opts: EditedEngineOptions = {}): Promise<string[]> {
  const plain = await openEditedEngine(dir, { ...opts, limits: { prefillChunkTokens: 16 } })
  const texts = await openThenType(plain.engine, dir, seeded)
  await plain.engine.close()
  return texts
}

/** The plans' restores: `fromBlocks` those restored from prefix-cache blocks. */
function countingRestores() {
  const seen = { restores: 0, fromBlocks: 0 }
  const rewrite = (plan: StepPlan): StepPlan => {
    seen.restores += plan.restore?.length ?? 0
    seen.fromBlocks += (plan.restore ?? []).filter((r) => r.prefix && r.prefix.length > 0).length
    return plan
  }
  return { seen, rewrite }
}

const RESTORE_LIMITS = { ...LIMITS, prefillChunkTokens: 64 }

for (const [name, dirOf, opts] of cases) {
  describe(`a request restored from cached blocks as a new row on ${name}`, () => {
    for (const seeded of [false, true]) {
      it(`gives the texts it has with no cache, into an emptied batch and beside a running row (${seeded ? 'seeded' : 'greedy'})`, async () => {
        const dir = dirOf()
        const reference = await openThenTypeUncached(dir, seeded, opts)
        expect(reference.every((t) => t.length > 0)).toBe(true)
        const counted = countingRestores()
        const cached = await openEditedEngine(dir, { ...opts, limits: RESTORE_LIMITS, rewrite: counted.rewrite })
        expect(await openThenType(cached.engine, dir, seeded)).toEqual(reference)
        expect(counted.seen.fromBlocks).toBeGreaterThanOrEqual(6)
        await cached.engine.close()
      })
    }
  })
}

describe('a request continuing a batch row on the concat KV path (tiny)', () => {
  it('copies a running row, with the texts it has alone; no row is taken over there', async () => {
    const dir = readModelDir(join(root, 'tiny-concat'))
    const reqs = keystrokes(dir, false)
    const reference = await alone(dir, reqs, { slotKvEdit: false })
    const seen = counting()
    const e = await openEditedEngine(dir, { slotKvEdit: false, limits: LIMITS, rewrite: seen.rewrite })
    expect((await typed(e.engine, reqs, false)).map((o) => o.text)).toEqual(reference)
    const superseded = await typed(e.engine, reqs.map((q) => ({ ...q, id: `again-${q.id}` })), true)
    expect(superseded.at(-1)!.text).toBe(reference.at(-1))
    expect(seen.seen.donors).toBeGreaterThan(0)
    expect(seen.seen.takeovers).toBe(0)
    await e.engine.close()
  })
})

describe('the row-continuing exactness test can fail (controls, tiny)', () => {
  it('catches a taken-over row cut one token short (its prompt fed at the wrong positions)', async () => {
    const dir = readModelDir(join(root, 'tiny'))
    const reqs = keystrokes(dir, false)
    const reference = await alone(dir, reqs, {})
    const short = (plan: StepPlan): StepPlan => (plan.takeover ? { ...plan, takeover: plan.takeover.map((t) => ({ ...t, keep: t.keep - 1 })) } : plan)
    const e = await openEditedEngine(dir, { limits: LIMITS, rewrite: short })
    expect((await typed(e.engine, reqs, true)).at(-1)!.text).not.toBe(reference.at(-1))
    await e.engine.close()
  })

  it('catches a restored row a block short (its prompt fed at the wrong positions)', async () => {
    const dir = readModelDir(join(root, 'tiny'))
    const reference = await openThenTypeUncached(dir, false)
    const short = (plan: StepPlan): StepPlan => (plan.restore ? { ...plan, restore: plan.restore.map((r) => (r.prefix?.length ? { ...r, prefix: r.prefix.slice(0, -1) } : r)) } : plan)
    const e = await openEditedEngine(dir, { limits: RESTORE_LIMITS, rewrite: short })
    expect(await openThenType(e.engine, dir, false)).not.toEqual(reference)
    await e.engine.close()
  })

  it("catches a prefill that copies one token too few of its donor's row", async () => {
    const dir = readModelDir(join(root, 'tiny'))
    const reqs = keystrokes(dir, false)
    const reference = await alone(dir, reqs, {})
    const fewer = <T extends { donor?: { seqId: number; tokens: number } }>(x: T): T => (x.donor ? { ...x, donor: { ...x.donor, tokens: x.donor.tokens - 1 } } : x)
    const few = (plan: StepPlan): StepPlan => ({ ...plan, prefill: plan.prefill.map((p) => (p.start ? { ...p, start: fewer(p.start) } : p)), ...(plan.restore ? { restore: plan.restore.map(fewer) } : {}) })
    const e = await openEditedEngine(dir, { limits: LIMITS, rewrite: few })
    expect((await typed(e.engine, reqs, false)).map((o) => o.text)).not.toEqual(reference)
    await e.engine.close()
  })
})
