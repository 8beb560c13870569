/** Lifecycle flags the routes read: /readyz, refusing new work while draining. */
export interface NodeState {
  /** The model is loaded and the engine accepts work. */
  ready: boolean
  /** SIGTERM received: finish in-flight streams, admit nothing new. */
  draining: boolean
}

/** How long a client refused by a draining node should wait before retrying (elsewhere), in ms. */
export const DRAINING_RETRY_AFTER_MS = 1000

export function createNodeState(): NodeState {
  return { ready: false, draining: false }
}
