import type { InferenceSession } from 'onnxruntime-node'

/**
 * Session options for ONNX Runtime sessions a test creates in its own process: one intra-op
 * thread. The suite runs two files at once on two cores; ONNX Runtime's default pool (a thread
 * per core, spinning between ops) in one file starves the other's processes (seen: a fault
 * test's node streaming a frame a second). Every kernel here gives the same numbers on one thread.
 */
export const ONE_THREAD: InferenceSession.SessionOptions = { intraOpNumThreads: 1, interOpNumThreads: 1 }
