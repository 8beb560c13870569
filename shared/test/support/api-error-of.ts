import { ApiError } from '../../src/api-error.ts'

/** The ApiError `fn` throws; fails the test when it returns, or throws anything else. */
export function apiErrorOf(fn: () => unknown): ApiError {
  try {
    fn()
  } catch (e) {
    if (e instanceof ApiError) return e
    throw e
  }
  throw new Error('expected an ApiError, and nothing was thrown')
}
