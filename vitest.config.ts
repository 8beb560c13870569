import { cloudflareTest } from '@cloudflare/vitest-pool-workers'
import { defineConfig } from 'vitest/config'
// Types only: the names the workers project's globalSetup provides (its ProvidedContext augmentation).
import type {} from './edge/test/workers/global-setup.ts'

/** Edge tests that run inside workerd (the Workers runtime), not in Node. */
const WORKERS_TESTS = 'edge/test/workers/**/*.test.ts'
/**
 * Whole-stack tests with timing bounds (a killed node's streams end within a second) or routing
 * that assumes idle nodes (the nearest region answers): they run after every other file and one
 * at a time, so no CPU-heavy ONNX Runtime test or second stack shares the 2 cores with them (on a
 * loaded box a heartbeat that caught queued requests sends traffic to the next region).
 */
const E2E_TESTS = 'test/{e2e,browser}/**/*.test.ts'

export default defineConfig({
  test: {
    reporters: ['default', './infra/scripts/summary-reporter.ts'],
    testTimeout: 60_000,
    hookTimeout: 180_000,
    // The machine has 2 cores and ONNX Runtime tests are CPU-heavy: keep files from starving each other.
    maxWorkers: 2,
    projects: [
      {
        extends: true,
        test: {
          name: 'node',
          include: ['{gpu-node,shared,edge,infra,bench}/**/*.test.ts', 'test/**/*.test.ts'],
          exclude: ['**/node_modules/**', WORKERS_TESTS, E2E_TESTS],
          globalSetup: ['./infra/scripts/test-global-setup.ts'],
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: 'e2e',
          include: [E2E_TESTS],
          globalSetup: ['./infra/scripts/test-global-setup.ts'],
          sequence: { groupOrder: 1 },
          // One stack at a time: each starts redis, the bridge, GPU nodes and a workerd edge.
          fileParallelism: false,
        },
      },
      {
        // @cloudflare/vitest-pool-workers 0.15 (vitest 4): a Vite plugin, not `pool: ...` options.
        // Options are resolved after this project's globalSetup, so `inject` sees what it provided.
        plugins: [
          cloudflareTest(({ inject }) => ({
            main: './edge/src/entries/worker.ts',
            wrangler: { configPath: './wrangler.toml' },
            miniflare: {
              bindings: {
                UPSTASH_REDIS_REST_URL: inject('upstashUrl'),
                REQUEST_LOG: '0',
                UPSTASH_REDIS_REST_TOKEN: inject('upstashToken'),
                EDGE_SHARED_SECRET: 'zl-test-edge-secret-0123456789',
                ADMIN_TOKEN: 'zl-test-admin-token-0123456789',
                GPU_NODES: inject('gpuNodes'),
                DEV_MODE: '1',
                UPSTREAM_CONNECT_TIMEOUT_MS: '500',
                DEFAULT_RPM: '1000',
                DEFAULT_TPM: '1000000',
                // Small latency batches, so 32 requests fill several: the request that fills a
                // batch writes it (edge/test/workers/latency.test.ts).
                LATENCY_BATCH_MAX_SAMPLES: '8',
                // For the tests themselves (not read by the edge).
                TEST_CONTROL_URL: inject('controlUrl'),
                TEST_DEAD_URL: inject('deadUrl'),
              },
            },
          })),
        ],
        test: {
          name: 'workers',
          include: [WORKERS_TESTS],
          sequence: { groupOrder: 0 },
          globalSetup: ['./edge/test/workers/global-setup.ts'],
          testTimeout: 30_000,
          hookTimeout: 60_000,
        },
      },
    ],
  },
})
