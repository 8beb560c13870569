/**
 * The two workerd modules the edge's workerd tests use, declared with the repo's web globals
 * (the full ambient @cloudflare/workers-types clashes with shared/: see edge/tsconfig.json).
 */
declare module 'cloudflare:workers' {
  export const env: Record<string, unknown>
}

declare module 'cloudflare:test' {
  /** The Worker under test (wrangler.toml `main`), reached like a service binding. */
  export const SELF: {
    fetch(input: string | Request | URL, init?: RequestInit & { cf?: Record<string, unknown> }): Promise<Response>
  }
  export interface TestExecutionContext {
    waitUntil(promise: Promise<unknown>): void
    passThroughOnException(): void
    props: unknown
  }
  export function createExecutionContext(): TestExecutionContext
  export function waitOnExecutionContext(ctx: TestExecutionContext): Promise<void>
}
