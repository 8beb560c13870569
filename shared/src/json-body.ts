/** Request body bytes → JSON value, failing as the client's fault (invalid_json, 400), never as a 500. */

import { ApiError } from './api-error.ts'

const decoder = new TextDecoder('utf-8', { fatal: true })

export function parseJsonBody(body: string | Uint8Array): unknown {
  let text: string
  try {
    text = typeof body === 'string' ? body : decoder.decode(body)
  } catch (e) {
    throw new ApiError('invalid_json', 'The request body is not valid UTF-8.', { cause: e })
  }
  if (text.trim() === '') throw new ApiError('invalid_json', 'The request body is empty; expected a JSON object.')
  try {
    return JSON.parse(text)
  } catch (e) {
    // A fixed message: engines' SyntaxError text quotes the input around the error, which would
    // echo part of the prompt back into an error body (and into logs that record it).
    throw new ApiError('invalid_json', 'The request body is not valid JSON.', { cause: e })
  }
}
