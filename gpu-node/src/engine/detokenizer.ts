/** Token ids → text, as the model's tokenizer does it (special tokens skipped). */
export interface TokenDecoder {
  decode(ids: readonly number[]): string
}

/**
 * Incremental, UTF-8-safe detokenizer (the prefix/read-offset scheme of TGI and vLLM).
 * Byte-level tokens can split a character: decoding such a prefix ends in U+FFFD, so text is
 * released only once it no longer ends in a partial character. Decoding a short window rather
 * than the whole sequence keeps each step O(1) and lets merges that depend on the previous
 * token (leading spaces, Metaspace) come out right.
 */
export class IncrementalDetokenizer {
  private readonly ids: number[] = []
  private prefixOffset = 0
  private readOffset = 0

  constructor(private readonly decoder: TokenDecoder) {}

  /** Adds one token; returns the newly complete text (possibly empty). */
  push(token: number): string {
    this.ids.push(token)
    const prefixText = this.decoder.decode(this.ids.slice(this.prefixOffset, this.readOffset))
    const fullText = this.decoder.decode(this.ids.slice(this.prefixOffset))
    if (fullText.length > prefixText.length && !fullText.endsWith('\uFFFD')) {
      this.prefixOffset = this.readOffset
      this.readOffset = this.ids.length
      return fullText.slice(prefixText.length)
    }
    return ''
  }

  /** Whatever is still held back at the end (a dangling partial character becomes U+FFFD). */
  flush(): string {
    const prefixText = this.decoder.decode(this.ids.slice(this.prefixOffset, this.readOffset))
    const fullText = this.decoder.decode(this.ids.slice(this.prefixOffset))
    this.prefixOffset = this.readOffset = this.ids.length
    return fullText.slice(prefixText.length)
  }
}
