/**
 * The pieces both services parse their configuration with (the edge from Workers bindings or
 * process.env, the node from process.env): zod types for env spellings, the known-names filter,
 * and one error that names every bad variable — never its value (several are secrets).
 */
import { z } from 'zod'

const FLAG_SPELLINGS = z.union([z.boolean(), z.enum(['1', 'true', '0', 'false', ''])]).optional()

/** Env flags are strings (a Workers [vars] value may be a boolean): only "1"/"true" mean on; unset, "", "0", "false" off. */
export const envFlag = FLAG_SPELLINGS.transform((v) => v === true || v === '1' || v === 'true')

/** A flag that is on unless set to "0"/"false". */
export const envFlagOn = FLAG_SPELLINGS.transform((v) => v === undefined || v === '' || v === true || v === '1' || v === 'true')

/** An integer in [min, max], from a string or a number. */
export const envInt = (min: number, max = Number.MAX_SAFE_INTEGER) => z.coerce.number().int().min(min).max(max)

/**
 * Only the names a schema knows, an empty (or blank) string read as unset, so `PORT=` in a .env
 * file means "default" rather than "invalid".
 */
export function pickKnown(env: Record<string, unknown>, names: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const name of names) {
    const v = env[name]
    out[name] = typeof v === 'string' && v.trim() === '' ? undefined : v
  }
  return out
}

/** One line per zod issue: `NAME: what was expected` (zod does not echo the input value here). */
export function issueLines(error: z.ZodError): string[] {
  return error.issues.map((i) => `${i.path.map(String).join('.')}: ${i.path.length === 0 ? 'invalid' : i.message}`)
}

/** The one error a service stops with: `invalid <what> configuration:` and a line per problem. */
export function configError(what: string, problems: string[]): Error {
  return new Error(`invalid ${what} configuration:\n  ${problems.join('\n  ')}`)
}
