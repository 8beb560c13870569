/**
 * ONNX external data: initializer bytes in a file beside model.onnx instead of inline raw_data,
 * as torch.onnx and Optimum write models past protobuf's 2 GB limit. Such a TensorProto carries
 * data_location = EXTERNAL and the external_data entries location / offset / length
 * (onnx-writer.ts encodes them); ONNX Runtime resolves `location` against the model file's
 * directory, so the session must be created from the model's path, not from its bytes.
 *
 * Layout: tensors of at least EXTERNAL_MIN_BYTES (onnx.save_model's default size_threshold) go
 * to the file in initializer order, each at a multiple of EXTERNAL_ALIGN_BYTES (a page, so a
 * runtime can map a tensor instead of copying it; the gaps are zeros). Smaller ones, the shape
 * constants, stay inline.
 */

import { writePieces } from './proto-wire.ts'

export const EXTERNAL_MIN_BYTES = 1024
export const EXTERNAL_ALIGN_BYTES = 4096

/** Where one tensor's bytes lie in the data file. */
export interface ExternalPlacement {
  offset: number
  length: number
}

/** A placement for each tensor size in bytes; undefined where the tensor stays inline. */
export function layoutExternalData(byteLengths: readonly number[]): Array<ExternalPlacement | undefined> {
  let end = 0
  return byteLengths.map((length) => {
    if (length < EXTERNAL_MIN_BYTES) return undefined
    const offset = Math.ceil(end / EXTERNAL_ALIGN_BYTES) * EXTERNAL_ALIGN_BYTES
    end = offset + length
    return { offset, length }
  })
}

/** Writes each chunk at its placement (chunks in increasing offset order, zeros between); returns the file size. */
export function writeExternalData(path: string, chunks: ReadonlyArray<{ at: ExternalPlacement; bytes: Uint8Array }>): number {
  return writePieces(path, padded(chunks))
}

function* padded(chunks: ReadonlyArray<{ at: ExternalPlacement; bytes: Uint8Array }>): Generator<Uint8Array> {
  const zeros = new Uint8Array(EXTERNAL_ALIGN_BYTES)
  let end = 0
  for (const { at, bytes } of chunks) {
    if (at.offset < end || at.length !== bytes.byteLength) throw new Error(`external data: chunk at ${at.offset} overlaps or mismatches its placement`)
    for (let gap = at.offset - end; gap > 0; gap -= zeros.byteLength) yield zeros.subarray(0, Math.min(gap, zeros.byteLength))
    yield bytes
    end = at.offset + at.length
  }
}
