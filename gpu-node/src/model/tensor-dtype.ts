import type * as ort from 'onnxruntime-node'

/**
 * The float types a graph's KV cache and logits may have: float32 (most exports) or float16
 * (Optimum `--dtype fp16`, onnx-community's model_fp16.onnx / model_q4f16.onnx). onnxruntime-node
 * carries float16 as raw IEEE half bits in a Uint16Array (Node 20 has no Float16Array), so the
 * KV caches move them as 16-bit words without ever converting.
 */
export type KvType = 'float32' | 'float16'
export type KvArray = Float32Array | Uint16Array

const BYTES: Record<KvType, number> = { float32: 4, float16: 2 }

export function isKvType(type: string): type is KvType {
  return type in BYTES
}

export function bytesPerElement(type: KvType): number {
  return BYTES[type]
}

/** A zeroed buffer of `n` elements of `type`. */
export function kvArray(type: KvType, n: number): KvArray {
  return type === 'float16' ? new Uint16Array(n) : new Float32Array(n)
}

/**
 * `length` floats of a float32 or float16 tensor from element `at`, as float32. A float16 value
 * converts to float32 exactly (every half is a float), so sampling float16 logits is sampling
 * exactly the values the graph produced; float32 data is returned as a view, not a copy.
 */
export function floatsOf(t: ort.Tensor, at: number, length: number): Float32Array {
  if (t.type === 'float32') return (t.data as Float32Array).subarray(at, at + length)
  if (t.type !== 'float16') throw new Error(`tensor type ${t.type} is not a float type the node reads (float32, float16)`)
  const half = t.data as Uint16Array
  const out = new Float32Array(length)
  const table = halfTable()
  for (let i = 0; i < length; i++) out[i] = table[half[at + i]]
  return out
}

let table: Float32Array | undefined

/** All 65536 halves as floats (256 KiB, built once): a lookup is faster than decoding per element. */
function halfTable(): Float32Array {
  if (table) return table
  table = new Float32Array(65536)
  for (let h = 0; h < 65536; h++) table[h] = halfToFloat(h)
  return table
}

/** IEEE 754 binary16 bits → number: sign, 5-bit exponent (bias 15), 10-bit fraction. */
export function halfToFloat(h: number): number {
  const sign = h & 0x8000 ? -1 : 1
  const exp = (h >> 10) & 0x1f
  const frac = h & 0x3ff
  if (exp === 0) return sign * frac * 2 ** -24 // zero and subnormals
  if (exp === 0x1f) return frac === 0 ? sign * Infinity : NaN
  return sign * (1 + frac / 1024) * 2 ** (exp - 15)
}
