/**
 * The Node entry's per-request log: the same JSON lines as console.log, but the lines of one
 * event-loop turn go out in ONE stdout write (console.log is a write per line, and under load
 * those writes were ~5 % of the edge's CPU). Lines keep their order; nothing is held longer than
 * until the next turn, and `flush()` writes what is buffered now (close()).
 */
import type { LogLine } from '../app-env.ts'

export interface BufferedLog {
  log: LogLine
  flush(): void
}

export function createBufferedLog(write: (text: string) => void = (t) => void process.stdout.write(t)): BufferedLog {
  let lines: string[] = []
  let scheduled = false
  const flush = () => {
    scheduled = false
    if (lines.length === 0) return
    const text = lines.join('\n') + '\n'
    lines = []
    write(text)
  }
  return {
    log(line) {
      lines.push(JSON.stringify(line))
      if (!scheduled) {
        scheduled = true
        setImmediate(flush)
      }
    },
    flush,
  }
}
