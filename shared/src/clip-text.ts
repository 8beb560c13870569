/**
 * Client-supplied text quoted back in an error message (an unknown model, an unknown route) is
 * cut to `maxChars`, with an ellipsis, so an error body stays small whatever the client sent.
 */
export function clipText(text: string, maxChars = 200): string {
  return text.length <= maxChars ? text : `${text.slice(0, maxChars)}…`
}
