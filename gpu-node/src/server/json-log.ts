/**
 * Structured logs: one JSON object per line. Callers pass fields, never prompts, bodies or
 * keys; the logger adds `ts` and `level`.
 */
export type LogFields = { msg: string } & Record<string, unknown>

export interface Logger {
  info(fields: LogFields): void
  warn(fields: LogFields): void
  error(fields: LogFields): void
}

export function createJsonLogger(write: (line: string) => void = (line) => process.stdout.write(line)): Logger {
  const emit = (level: string) => (fields: LogFields) => {
    write(`${JSON.stringify({ ts: new Date().toISOString(), level, ...fields })}\n`)
  }
  return { info: emit('info'), warn: emit('warn'), error: emit('error') }
}
