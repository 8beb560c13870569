import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['{gpu-node,shared,edge,infra}/**/*.test.ts', 'test/**/*.test.ts'],
    reporters: ['default', './infra/scripts/summary-reporter.ts'],
    testTimeout: 60_000,
    hookTimeout: 180_000,
    // The machine has 2 cores and ONNX Runtime tests are CPU-heavy: keep files from starving each other.
    maxWorkers: 2,
    globalSetup: ['./infra/scripts/test-global-setup.ts'],
  },
})
