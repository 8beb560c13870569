/**
 * Step 2: who is calling. `Authorization: Bearer <key>` or `x-api-key: <key>`; only sha256(key)
 * is looked up (through the per-isolate KeyCache). The key never reaches a log line, an error
 * body or a context variable.
 *
 * Answers: no key, a malformed or unknown key, or two different credentials (an Authorization
 * header and an x-api-key that disagree: which one the caller meant is anyone's guess, so neither
 * is looked up) → 401 (authentication_error); a disabled key →
 * 403 (permission_error: the key is known but may not be used). Models outside a key's
 * allowlist are refused later, by validate.ts, as 404 — the answer OpenAI gives ("does not exist
 * or you do not have access to it"), which does not reveal which models exist.
 * With `allowAdmin`, ADMIN_TOKEN (constant-time compared) is accepted as well.
 */
import type { MiddlewareHandler } from 'hono'
import { hashApiKey, isWellFormedApiKey, type ApiKeyRecord } from '../../../shared/src/api-key.ts'
import { ApiError } from '../../../shared/src/api-error.ts'
import { andThen } from '../../../shared/src/maybe-promise.ts'
import { webDigest, type Digest } from '../../../shared/src/digest.ts'
import type { AppEnv, Background, Principal } from '../context.ts'
import type { EdgeConfig } from '../config.ts'
import type { KeyCache } from '../keys/key-cache.ts'
import type { Step } from './pipeline.ts'
import { secretsEqual } from './secret-compare.ts'

/** How long a client should wait when the key store cannot be reached. */
const STORE_RETRY_MS = 1000

export interface AuthOptions {
  /** Accept ADMIN_TOKEN as well as API keys (read-only operator routes). */
  allowAdmin?: boolean
  /** Hashes the presented key (default: Web Crypto). */
  digest?: Digest
}

/** The operator routes' middleware (API keys and, with `allowAdmin`, ADMIN_TOKEN). */
export function authenticate(config: EdgeConfig, keys: KeyCache, options: AuthOptions = {}): MiddlewareHandler<AppEnv> {
  const step = authenticateKey(config, keys, options)
  return async (c, next) => {
    await step(c)
    return next()
  }
}

/** The same check as a step of the generate pipeline: no promise when the key's record is cached. */
export function authenticateKey(config: EdgeConfig, keys: KeyCache, options: AuthOptions = {}): Step {
  const digest = options.digest ?? webDigest
  return (c) => {
    const presented = presentedKey(c.req.header('authorization'), c.req.header('x-api-key'))
    if (presented === undefined) {
      throw new ApiError('unauthorized', "Missing API key: send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'.")
    }
    if (presented === AMBIGUOUS) {
      throw new ApiError('unauthorized', "Two different credentials were sent, in 'Authorization' and in 'x-api-key': send one API key, in either header, or the same key in both.")
    }
    const byKey = () => andThen(principalForKey(presented, config, keys, digest, c.get('waitUntil')), (p) => void c.set('principal', p))
    if (options.allowAdmin && config.adminToken !== undefined) {
      return secretsEqual(presented, config.adminToken).then((isAdmin) => (isAdmin ? void c.set('principal', adminPrincipal()) : byKey()))
    }
    return byKey()
  }
}

/** Both credential headers were sent and they disagree. */
const AMBIGUOUS = Symbol('ambiguous credentials')

/**
 * The one key the request presents. The SDKs send one header (@anthropic-ai/sdk 1.x an apiKey as
 * `Authorization: Bearer`, older clients and curl lines `x-api-key`): the same key in both is
 * one identity, two different values are ambiguous, whichever of them is valid. Beside an x-api-key, an
 * Authorization header that is not `Bearer <key>` is a second credential too (its whole value is
 * compared); alone, it presents no key.
 */
function presentedKey(authorization: string | undefined, xApiKey: string | undefined): string | typeof AMBIGUOUS | undefined {
  const auth = authorization?.trim() || undefined
  const bearer = auth?.match(/^Bearer\s+(\S+)$/i)?.[1]
  const apiKey = xApiKey?.trim() || undefined
  if (auth !== undefined && apiKey !== undefined && (bearer ?? auth) !== apiKey) return AMBIGUOUS
  return bearer ?? apiKey
}

/** The key's principal: at once when the digest is synchronous and the record cached (the common case), else after the store. */
function principalForKey(key: string, config: EdgeConfig, keys: KeyCache, digest: Digest, background?: Background): Principal | Promise<Principal> {
  // Malformed keys cannot exist in the store: refused without a lookup (and without echoing them).
  if (!isWellFormedApiKey(key)) throw invalidKey()
  const hashed = hashApiKey(key, digest)
  const cached = typeof hashed === 'string' ? keys.fresh(hashed, background) : undefined
  if (cached) return principalOf(cached, config)
  return lookedUp(hashed, keys).then((record) => principalOf(record, config))
}

async function lookedUp(hashed: string | Promise<string>, keys: KeyCache): Promise<ApiKeyRecord | undefined> {
  try {
    return await keys.lookup(await hashed)
  } catch (e) {
    throw new ApiError('overloaded', 'Authentication is temporarily unavailable; please retry.', { retryAfterMs: STORE_RETRY_MS, cause: e })
  }
}

function principalOf(record: ApiKeyRecord | undefined, config: EdgeConfig): Principal {
  if (!record) throw invalidKey()
  if (record.disabled) throw new ApiError('forbidden', 'This API key has been disabled.')
  return {
    keyId: record.id,
    tenant: record.tenant,
    rpm: record.rpm > 0 ? record.rpm : config.defaultRpm,
    tpm: record.tpm > 0 ? record.tpm : config.defaultTpm,
    models: record.models.length > 0 ? record.models : ['*'],
    admin: false,
    priorityClass: record.priority ?? 'interactive',
  }
}

function invalidKey(): ApiError {
  return new ApiError('unauthorized', 'Invalid API key.')
}

function adminPrincipal(): Principal {
  return { keyId: 'admin', tenant: '*', rpm: 0, tpm: 0, models: ['*'], admin: true, priorityClass: 'interactive' }
}

/** Whether a principal may use a model (its allowlist, or '*'). */
export function mayUseModel(principal: Principal, model: string): boolean {
  return principal.models.includes('*') || principal.models.includes(model)
}
