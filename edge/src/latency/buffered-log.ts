/**
 * The Node entry's per-request log: the same JSON lines as console.log, written to stdout together
 * at most every FLUSH_MS (or at once when MAX_BUFFERED_CHARS are waiting), in order. Every write
 * to a pipe is a synchronous system call through Node's stream machinery: one per line (console.log)
 * was ~5 % of the edge's CPU under load, and one per event-loop turn was still one per request at
 * low rates, ~13 k instructions each (a callgrind count of node writing JSON lines to a pipe: 15.0 k
 * per line written alone, 2.3 k per line written twenty at a time). A line waits at most FLUSH_MS,
 * the way log shippers batch; `flush()` writes what is buffered now (close()), so a process that
 * is killed outright loses at most that much.
 */
import type { LogLine } from '../context.ts'

/** The longest a line waits for its write. */
export const FLUSH_MS = 50
/** Buffered text (UTF-16 code units) that is written without waiting for the timer. */
export const MAX_BUFFERED_CHARS = 64 * 1024

export interface BufferedLog {
  log: LogLine
  flush(): void
}

export function createBufferedLog(write: (text: string) => void = (t) => void process.stdout.write(t)): BufferedLog {
  let text = ''
  let timer: ReturnType<typeof setTimeout> | undefined
  const flush = () => {
    if (timer) clearTimeout(timer)
    timer = undefined
    if (text === '') return
    const out = text
    text = ''
    write(out)
  }
  return {
    log(line) {
      text += JSON.stringify(line) + '\n'
      if (text.length >= MAX_BUFFERED_CHARS) flush()
      else if (!timer) timer = setTimeout(flush, FLUSH_MS).unref()
    },
    flush,
  }
}
