/**
 * OpenAI's `response_format` (chat completions): `text`, `json_object` (any JSON object) or
 * `json_schema` (a document the given JSON Schema accepts), enforced on the node token by token
 * (gpu-node/src/structured/). A schema may use only what the grammar engine enforces exactly;
 * anything else is refused by name rather than silently ignored (xgrammar, for one, drops
 * `multipleOf`, `uniqueItems`, `allOf` and `not`, and approximates ranges on non-integers).
 * The output is compact JSON (no whitespace between tokens).
 */
import { z } from 'zod'
import { ApiError } from '../api-error.ts'
import type { OutputConstraint } from '../generation.ts'

/** Serialized schema size and nesting the edge accepts: bounded compile time and memory on the node. */
export const MAX_SCHEMA_BYTES = 32 * 1024
export const MAX_SCHEMA_DEPTH = 24

/** A schema's or a function's name, as OpenAI and Anthropic accept it. */
export const NAME = /^[a-zA-Z0-9_-]{1,64}$/
export const NAME_RULE = 'must be 1-64 characters of a-z, A-Z, 0-9, _ and -'


export const responseFormatField = {
  response_format: z
    .discriminatedUnion('type', [
      z.strictObject({ type: z.literal('text') }),
      z.strictObject({ type: z.literal('json_object') }),
      z.strictObject({
        type: z.literal('json_schema'),
        json_schema: z.strictObject({
          name: z.string().regex(NAME, { error: NAME_RULE }),
          description: z.string().optional(),
          schema: z.record(z.string(), z.unknown()).optional(),
          strict: z.boolean().nullish(),
        }),
      }),
    ])
    .nullish(),
}
export type ResponseFormat = z.output<(typeof responseFormatField)['response_format']>

/** The node's constraint for a parsed response_format; throws a 400 naming what the engine cannot enforce. */
export function toOutputConstraint(format: ResponseFormat, schemaParam = 'response_format.json_schema.schema'): OutputConstraint | undefined {
  if (!format || format.type === 'text') return undefined
  if (format.type === 'json_object') return { kind: 'json_object' }
  return { kind: 'json_schema', schema: schemaText(format.json_schema.schema ?? {}, schemaParam) }
}

/** A schema serialized for the node, after checking its size and that the engine enforces all of it; `param` is its wire path. */
export function schemaText(schema: Record<string, unknown>, param: string): string {
  const text = JSON.stringify(schema)
  if (text.length > MAX_SCHEMA_BYTES) throw new ApiError('invalid_request', `'${param}' is ${text.length} bytes; at most ${MAX_SCHEMA_BYTES} are accepted.`, { param })
  const refs: string[] = []
  const problem = schemaProblem(schema, refs) ?? unresolvedRef(schema, refs)
  if (problem) throw new ApiError('invalid_request', `'${param}${problem.at}' ${problem.message}.`, { param })
  return text
}

/** Keywords that only describe. */
const ANNOTATIONS = new Set(['$schema', '$id', '$comment', 'title', 'description', 'default', 'examples', 'deprecated', 'readOnly', 'writeOnly'])
/** Keywords enforced exactly, whatever the type. */
const ENFORCED = new Set(['type', 'enum', 'const', 'properties', 'required', 'additionalProperties', 'items', 'prefixItems', 'minItems', 'maxItems', 'anyOf', '$ref', '$defs', 'definitions', 'minProperties', 'maxProperties', 'minLength', 'maxLength', 'pattern', 'format'])
/** Range keywords: exact on integers only. */
const INTEGER_RANGE = new Set(['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'])
const FORMATS = new Set(['date', 'time', 'date-time', 'duration', 'email', 'hostname', 'ipv4', 'ipv6', 'uuid', 'uri', 'uri-reference', 'json-pointer'])
const TYPES = new Set(['string', 'number', 'integer', 'boolean', 'null', 'object', 'array'])
const WHY: Record<string, string> = {
  oneOf: "would be enforced as 'anyOf' (use anyOf)",
  allOf: 'cannot be enforced by the grammar engine',
  not: 'cannot be enforced by the grammar engine',
  multipleOf: 'cannot be enforced by the grammar engine',
  uniqueItems: 'cannot be enforced by the grammar engine',
}

interface Problem {
  at: string
  message: string
}

/**
 * The first part of `schema` the engine cannot enforce exactly (its path and why), or undefined;
 * every $ref it passes is added to `refs`.
 */
export function schemaProblem(schema: unknown, refs: string[] = [], at = '', depth = 0): Problem | undefined {
  if (typeof schema === 'boolean') return undefined
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) return { at, message: 'must be a JSON Schema (an object or a boolean)' }
  if (depth > MAX_SCHEMA_DEPTH) return { at, message: `nests deeper than ${MAX_SCHEMA_DEPTH} levels` }
  const s = schema as Record<string, unknown>
  const types = typeof s.type === 'string' ? [s.type] : Array.isArray(s.type) ? s.type : s.type === undefined ? [] : [s.type]
  for (const t of types) if (typeof t !== 'string' || !TYPES.has(t)) return { at: `${at}.type`, message: `must be one of ${[...TYPES].join(', ')}` }
  for (const key of Object.keys(s)) {
    if (ANNOTATIONS.has(key) || ENFORCED.has(key)) continue
    if (INTEGER_RANGE.has(key)) {
      if (types.length === 1 && types[0] === 'integer') continue
      return { at: `${at}.${key}`, message: 'is enforced only on "type": "integer" (ranges on other numbers cannot be enforced exactly)' }
    }
    return { at: `${at}.${key}`, message: `is not supported: it ${WHY[key] ?? 'is not a keyword the grammar engine enforces'}` }
  }
  if (s.format !== undefined && (typeof s.format !== 'string' || !FORMATS.has(s.format))) return { at: `${at}.format`, message: `must be one of ${[...FORMATS].join(', ')}` }
  if (s.pattern !== undefined && typeof s.pattern !== 'string') return { at: `${at}.pattern`, message: 'must be a string' }
  if (s.pattern !== undefined) {
    try {
      new RegExp(s.pattern as string, 'u')
    } catch {
      return { at: `${at}.pattern`, message: 'is not a valid regular expression' }
    }
  }
  if (s.$ref !== undefined) {
    if (typeof s.$ref !== 'string' || !/^#\/(\$defs|definitions)\/[^/]+$/.test(s.$ref)) return { at: `${at}.$ref`, message: "must point into this schema's $defs or definitions (#/$defs/<name>)" }
    refs.push(s.$ref)
  }
  const children: Array<[string, unknown]> = []
  for (const key of ['properties', '$defs', 'definitions'] as const) {
    const map = s[key]
    if (map === undefined) continue
    if (typeof map !== 'object' || map === null || Array.isArray(map)) return { at: `${at}.${key}`, message: 'must be an object' }
    for (const [name, child] of Object.entries(map)) children.push([`${at}.${key}.${name}`, child])
  }
  for (const key of ['items', 'additionalProperties'] as const) if (s[key] !== undefined) children.push([`${at}.${key}`, s[key]])
  for (const key of ['prefixItems', 'anyOf'] as const) {
    const list = s[key]
    if (list === undefined) continue
    if (!Array.isArray(list)) return { at: `${at}.${key}`, message: 'must be an array' }
    list.forEach((child, i) => children.push([`${at}.${key}[${i}]`, child]))
  }
  for (const [path, child] of children) {
    const problem = schemaProblem(child, refs, path, depth + 1)
    if (problem) return problem
  }
  return undefined
}

/** A $ref (of those schemaProblem collected) to a definition the schema does not have: $defs live at its root. */
function unresolvedRef(schema: Record<string, unknown>, refs: readonly string[]): Problem | undefined {
  const defined = (key: string) => Object.keys((schema[key] as Record<string, unknown> | undefined) ?? {})
  const names = new Set([...defined('$defs').map((n) => `#/$defs/${n}`), ...defined('definitions').map((n) => `#/definitions/${n}`)])
  const missing = refs.find((r) => !names.has(r))
  return missing === undefined ? undefined : { at: '', message: `refers to ${missing}, which it does not define` }
}
