import type { Reporter, TestModule } from 'vitest/node'

/** Prints the plain `N passed, N failed, N skipped` line that CI reads, after vitest's own report. */
export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<unknown>): void {
    let passed = 0
    let failed = 0
    let skipped = 0
    for (const mod of testModules) {
      let failedHere = 0
      for (const test of mod.children.allTests()) {
        const state = test.result().state
        if (state === 'passed') passed++
        else if (state === 'failed') failedHere++
        else skipped++
      }
      // A file that failed with no failed test (it did not load, or a beforeAll threw and its
      // tests were skipped) is one failure: the line must never read "0 failed" for a red run.
      failed += failedHere === 0 && mod.state() === 'failed' ? 1 : failedHere
    }
    failed += unhandledErrors.length
    process.stdout.write(`\n${passed} passed, ${failed} failed, ${skipped} skipped\n`)
  }
}
