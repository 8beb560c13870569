/** `text` parsed as a JSON object, or undefined when it is not valid JSON or not an object. */
export function parsedObject(text: string): Record<string, unknown> | undefined {
  let v: unknown
  try {
    v = JSON.parse(text)
  } catch {
    return undefined
  }
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined
}

/** Characters as JSON Schema counts them (code points, not UTF-16 units). */
export const codePoints = (s: unknown): number => (typeof s === 'string' ? [...s].length : -1)
