import type { Logger } from '../../src/server/json-log.ts'

/** A logger that drops everything: tests that do not read the node's log lines. */
export const silentLogger: Logger = { info() {}, warn() {}, error() {} }
