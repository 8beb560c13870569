import { describe, expect, it } from 'vitest'
import { apiErrorOf } from '../../test/support/api-error-of.ts'
import { MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH, schemaProblem, toOutputConstraint } from './response-format.ts'

const refusal = (schema: Record<string, unknown>) => apiErrorOf(() => toOutputConstraint({ type: 'json_schema', json_schema: { name: 's', schema } }))

describe('response_format json_schema: only what the grammar engine enforces exactly', () => {
  it('accepts the schemas the SDK helpers write (zodResponseFormat: $schema, definitions, strict objects)', () => {
    const schema = {
      $schema: 'http://json-schema.org/draft-07/schema#',
      type: 'object',
      properties: {
        name: { type: 'string', minLength: 1, maxLength: 20, pattern: '^[A-Z]' },
        when: { type: 'string', format: 'date-time' },
        n: { type: 'integer', minimum: 1, exclusiveMaximum: 10 },
        tags: { type: 'array', items: { $ref: '#/definitions/tag' }, maxItems: 3 },
        kind: { anyOf: [{ const: 'a' }, { type: 'null' }] },
        score: { type: 'number', description: 'any number' },
      },
      required: ['name', 'when', 'n', 'tags', 'kind', 'score'],
      additionalProperties: false,
      definitions: { tag: { type: 'string', enum: ['x', 'y'] } },
    }
    expect(schemaProblem(schema)).toBeUndefined()
    expect(toOutputConstraint({ type: 'json_schema', json_schema: { name: 's', schema } })).toEqual({ kind: 'json_schema', schema: JSON.stringify(schema) })
  })

  it('refuses, by path and name, what it would otherwise ignore or approximate', () => {
    expect(refusal({ type: 'object', properties: { n: { type: 'integer', multipleOf: 2 } } }).message).toBe(
      "'response_format.json_schema.schema.properties.n.multipleOf' is not supported: it cannot be enforced by the grammar engine.",
    )
    expect(refusal({ type: 'array', uniqueItems: true }).param).toBe('response_format.json_schema.schema')
    expect(refusal({ oneOf: [{ type: 'string' }] }).message).toContain("would be enforced as 'anyOf'")
    expect(refusal({ allOf: [{ type: 'string' }] }).message).toContain('.allOf')
    expect(refusal({ type: 'number', minimum: 0 }).message).toContain('enforced only on "type": "integer"')
    expect(refusal({ type: 'string', format: 'idn-email' }).message).toContain('.format')
    expect(refusal({ type: 'string', pattern: '(' }).message).toContain('not a valid regular expression')
    expect(refusal({ type: 'strings' }).message).toContain('.type')
    expect(refusal({ if: { type: 'string' } }).message).toContain('.if')
    expect(refusal({ $ref: 'https://example.com/s.json' }).message).toContain('.$ref')
    expect(refusal({ type: 'object', properties: { a: { $ref: '#/$defs/b' } } }).message).toContain('refers to #/$defs/b, which it does not define')
  })

  it('bounds size and depth', () => {
    let deep: Record<string, unknown> = { type: 'string' }
    for (let i = 0; i <= MAX_SCHEMA_DEPTH; i++) deep = { type: 'array', items: deep }
    expect(refusal(deep).message).toContain(`nests deeper than ${MAX_SCHEMA_DEPTH} levels`)
    const wide = { type: 'object', properties: Object.fromEntries(Array.from({ length: 2000 }, (_, i) => [`property_${i}`, { type: 'boolean' }])) }
    expect(refusal(wide).message).toContain(`at most ${MAX_SCHEMA_BYTES} are accepted`)
  })
})
