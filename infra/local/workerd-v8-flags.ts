/**
 * V8 flags for the workerd that Miniflare starts. workerd takes them from its config
 * (`Config.v8Flags`), which Miniflare builds itself and writes to workerd's stdin as a binary
 * Cap'n Proto message, without an option for them. So the local edge points
 * MINIFLARE_WORKERD_PATH at workerd-v8-flags.sh, which replaces itself with the real workerd
 * reading the config through `withV8Flags` (this file's CLI: stdin → stdout).
 *
 * Why the local edge needs one (measured: edge/README.md "The local Workers edge's memory under
 * sustained load"): each request leaves native memory in workerd (its request, response and
 * stream objects) that is freed only when V8 collects the JS objects wrapping it, and V8 lets its
 * heap grow to ~100 MB of garbage before a full collection; workerd's allocator (tcmalloc) keeps
 * what is freed and never returns it to the system. With `--optimize-for-size` V8 collects that
 * garbage before it piles up.
 *
 * The patch: Config's `v8Flags` is its pointer field 2 (services, sockets, v8Flags, extensions,
 * autogates, logging: workerd.capnp). The flags are appended to the end of the root struct's
 * segment as a List(Text), and that pointer is set to it; the rest of the message is unchanged.
 */
import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'

/** Config.v8Flags' place among Config's pointer fields (workerd.capnp: @2, after services and sockets). */
const V8_FLAGS_POINTER = 2

interface Segments {
  words: Uint8Array[]
}

function readSegments(message: Uint8Array): Segments {
  const view = new DataView(message.buffer, message.byteOffset, message.byteLength)
  const count = view.getUint32(0, true) + 1
  const headerBytes = 4 * (1 + count) + (count % 2 === 0 ? 4 : 0)
  const words: Uint8Array[] = []
  let at = headerBytes
  for (let i = 0; i < count; i++) {
    const bytes = view.getUint32(4 * (1 + i), true) * 8
    if (at + bytes > message.byteLength) throw new Error('workerd config: truncated Cap\'n Proto message')
    words.push(message.subarray(at, at + bytes))
    at += bytes
  }
  return { words }
}

function writeSegments(segments: Uint8Array[]): Uint8Array {
  const count = segments.length
  const headerBytes = 4 * (1 + count) + (count % 2 === 0 ? 4 : 0)
  const out = new Uint8Array(headerBytes + segments.reduce((n, s) => n + s.byteLength, 0))
  const view = new DataView(out.buffer)
  view.setUint32(0, count - 1, true)
  segments.forEach((s, i) => view.setUint32(4 * (1 + i), s.byteLength / 8, true))
  let at = headerBytes
  for (const s of segments) {
    out.set(s, at)
    at += s.byteLength
  }
  return out
}

/** Where the root struct is: its segment, first word, data words and pointer count. */
function rootStruct(segments: Uint8Array[]): { segment: number; start: number; dataWords: number; pointers: number } {
  const seg0 = new DataView(segments[0]!.buffer, segments[0]!.byteOffset, segments[0]!.byteLength)
  let lo = seg0.getUint32(0, true)
  let hi = seg0.getUint32(4, true)
  let segment = 0
  let pointerWord = 0
  if ((lo & 3) === 2) {
    // A far pointer: a single-word landing pad elsewhere holds the struct pointer.
    if (lo & 4) throw new Error('workerd config: double-far root pointer not supported')
    segment = hi
    pointerWord = lo >>> 3
    const pad = new DataView(segments[segment]!.buffer, segments[segment]!.byteOffset, segments[segment]!.byteLength)
    lo = pad.getUint32(pointerWord * 8, true)
    hi = pad.getUint32(pointerWord * 8 + 4, true)
  }
  if ((lo & 3) !== 0) throw new Error('workerd config: root pointer is not a struct pointer')
  const offset = (lo | 0) >> 2
  return { segment, start: pointerWord + 1 + offset, dataWords: hi & 0xffff, pointers: hi >>> 16 }
}

/** `message` (a binary Config, as Miniflare writes it) with `Config.v8Flags` set to `flags`. */
export function withV8Flags(message: Uint8Array, flags: readonly string[]): Uint8Array {
  if (flags.length === 0) return message
  const segments = readSegments(message).words
  const root = rootStruct(segments)
  if (root.pointers <= V8_FLAGS_POINTER) throw new Error(`workerd config: the root struct has ${root.pointers} pointers, no v8Flags field`)
  const texts = flags.map((f) => new TextEncoder().encode(f))
  // The list of text pointers, then each text NUL-terminated and padded to whole words.
  const textWords = texts.map((t) => Math.ceil((t.byteLength + 1) / 8))
  const old = segments[root.segment]!
  const oldWords = old.byteLength / 8
  const grown = new Uint8Array(old.byteLength + 8 * (texts.length + textWords.reduce((n, w) => n + w, 0)))
  grown.set(old)
  const view = new DataView(grown.buffer)
  const setPointer = (word: number, target: number, elementSize: number, count: number) => {
    view.setUint32(word * 8, (((target - word - 1) << 2) | 1) >>> 0, true)
    view.setUint32(word * 8 + 4, ((count << 3) | elementSize) >>> 0, true)
  }
  const listStart = oldWords
  let textAt = listStart + texts.length
  texts.forEach((t, i) => {
    grown.set(t, textAt * 8)
    // Element size 2: bytes, the count including the NUL.
    setPointer(listStart + i, textAt, 2, t.byteLength + 1)
    textAt += textWords[i]!
  })
  // Element size 6: pointers.
  setPointer(root.start + root.dataWords + V8_FLAGS_POINTER, listStart, 6, texts.length)
  segments[root.segment] = grown
  return writeSegments(segments)
}

/** The flags the wrapper passes (ZL_WORKERD_V8_FLAGS: space-separated). */
export function v8FlagsFromEnv(value: string | undefined): string[] {
  return (value ?? '').split(/\s+/).filter(Boolean)
}

// The wrapper's filter: the config on stdin, patched, on stdout.
if (process.argv[1] && resolve(process.argv[1]) === import.meta.filename) {
  // Through the stream, not writeSync: workerd's end of the pipe may be non-blocking (EAGAIN).
  process.stdout.write(withV8Flags(readFileSync(0), v8FlagsFromEnv(process.env.ZL_WORKERD_V8_FLAGS)))
}
