/**
 * Runs a dialect's zod schema and turns the first problem into one clear ApiError naming the
 * field (`'messages[0].content' must be a string or an array, got number`), never a ZodError dump.
 * Messages are predicates that follow the quoted field path; schemas may give their own
 * (e.g. `n`), phrased the same way.
 */

import { z } from 'zod'
import { ApiError } from '../api-error.ts'

/** Why a known-but-unsupported field is rejected, by field name (e.g. `tools`). */
export type UnsupportedFields = Readonly<Record<string, string>>

export function validateBody<S extends z.ZodType>(schema: S, body: unknown, unsupported: UnsupportedFields): z.output<S> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new ApiError('invalid_request', 'The request body must be a JSON object.')
  }
  // Parsed without the error map first: a per-call map makes zod's parse several times slower,
  // and only a failing body needs its issues phrased.
  const fast = schema.safeParse(body)
  if (fast.success) return fast.data
  const result = schema.safeParse(body, { error: phrase })
  if (result.success) return result.data
  throw toApiError(pickIssue(result.error.issues), [], unsupported)
}

/**
 * The issue that explains the others: a wrong `type` discriminator (an image part also has an
 * unknown `image_url` key and no `text`), then an unsupported field (a client sending `tools`
 * wants to hear that first), then the first problem found.
 */
function pickIssue(issues: readonly z.core.$ZodIssue[]): z.core.$ZodIssue {
  return (
    issues.find((i) => i.code === 'invalid_value' && i.path[i.path.length - 1] === 'type') ??
    issues.find((i) => i.code === 'unrecognized_keys') ??
    issues[0]!
  )
}

function toApiError(issue: z.core.$ZodIssue, prefix: readonly PropertyKey[], unsupported: UnsupportedFields): ApiError {
  const path = [...prefix, ...issue.path]
  if (issue.code === 'unrecognized_keys') {
    const key = issue.keys[0]!
    const param = formatPath([...path, key])
    const reason = unsupported[key]
    const message = reason ? `'${param}' is not supported: ${reason}.` : `'${param}' is not a supported parameter.`
    return new ApiError('invalid_request', message, { param })
  }
  if (issue.code === 'invalid_union') {
    // A branch that got past the type check (e.g. the array branch of string|array) holds the real problem.
    const branch = issue.errors.find((b) => !b.every((i) => i.code === 'invalid_type' && i.path.length === 0))
    if (branch && branch.length > 0) return toApiError(pickIssue(branch), path, unsupported)
  }
  const param = formatPath(path)
  if (param === '') return new ApiError('invalid_request', `The request body ${issue.message}.`)
  return new ApiError('invalid_request', `'${param}' ${issue.message}.`, { param })
}

/** `['messages', 0, 'content']` → `messages[0].content`. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = ''
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`
    else out += out === '' ? String(key) : `.${String(key)}`
  }
  return out
}

/** The per-parse error map: a predicate for each issue kind, e.g. "must be at most 2". */
function phrase(iss: z.core.$ZodRawIssue): string | undefined {
  switch (iss.code) {
    case 'invalid_type':
      return iss.input === undefined ? 'is required' : `must be ${typeName(iss.expected)}, got ${describe(iss.input)}`
    case 'too_big':
      return bound('at most', 'less than', iss.origin, iss.maximum, iss.inclusive)
    case 'too_small':
      if ((iss.origin === 'array' || iss.origin === 'string') && Number(iss.minimum) === 1) return 'must not be empty'
      return bound('at least', 'greater than', iss.origin, iss.minimum, iss.inclusive)
    case 'invalid_value':
      return `must be ${iss.values.map((v) => JSON.stringify(v)).join(' or ')}`
    case 'invalid_union': {
      if (iss.input === undefined) return 'is required'
      const expected = iss.errors.map((b) => b.find((i) => i.code === 'invalid_type')?.expected).filter((e) => e !== undefined)
      return `must be ${expected.map(typeName).join(' or ')}, got ${describe(iss.input)}`
    }
    default:
      return undefined
  }
}

function bound(inclusiveWord: string, exclusiveWord: string, origin: string, limit: number | bigint, inclusive: boolean | undefined): string {
  const word = inclusive === false ? exclusiveWord : inclusiveWord
  if (origin === 'array') return `must have ${word} ${limit} items`
  if (origin === 'string') return `must be ${word} ${limit} characters long`
  return `must be ${word} ${limit}`
}

function typeName(expected: string): string {
  if (expected === 'int') return 'an integer'
  if (expected === 'record') return 'an object'
  if (expected === 'null') return 'null'
  return /^[aeiou]/.test(expected) ? `an ${expected}` : `a ${expected}`
}

function describe(input: unknown): string {
  if (input === null) return 'null'
  if (Array.isArray(input)) return 'array'
  if (typeof input === 'number' || typeof input === 'boolean') return String(input)
  return typeof input
}
