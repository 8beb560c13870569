/** Prompt and stop-string helpers shared by the node tests. */

/** Text the tiny model's byte-level tokenizer cannot fit in its 1024-token context (about 6 KB, well under any body limit). */
export function longPrompt(): string {
  let s = ''
  for (let i = 0; s.length < 6000; i++) s += `${(i * 7919) % 1000}${String.fromCharCode(65 + (i % 26))}~`
  return s
}

/**
 * A 4-character substring from the middle of `text` whose first occurrence is past the start:
 * a stop string the same greedy generation must stop at, leaving `text.slice(0, text.indexOf(stop))`.
 */
export function pickStop(text: string): string {
  for (let i = Math.floor(text.length / 2); i < text.length - 4; i++) {
    const s = text.slice(i, i + 4)
    if (s.trim() !== '' && text.indexOf(s) > 0) return s
  }
  throw new Error(`no usable stop string in ${JSON.stringify(text)}`)
}
