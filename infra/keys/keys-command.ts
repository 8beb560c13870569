/**
 * The `npm run keys` commands over a Redis client, so tests run them without a process:
 * `create --tenant T [--name N] [--rpm N] [--tpm N] [--models a,b]`, `list [--tenant T]`,
 * `revoke <id>`; `--json` prints machine-readable output.
 */
import { parseArgs } from 'node:util'
import { createKey, listKeys, revokeKey, type KeyAdminRedis, type KeyListing } from './key-admin.ts'
import { isPriorityClass, PRIORITY_CLASSES, type PriorityClass } from '../../shared/src/priority.ts'

export const KEYS_USAGE = `usage: npm run keys -- <command>
  create --tenant T [--name N] [--rpm N] [--tpm N] [--models a,b] [--priority interactive|batch] [--json]
         creates a key and prints it once (only its sha256 is stored)
  list [--tenant T] [--json]      ids, tenants, limits; never the keys
  revoke <id> [--json]            disables a key (edges notice within 30 s)`

export interface KeysIo {
  out: (line: string) => void
  err: (line: string) => void
}

/** Runs one command; resolves to the process exit code. */
export async function runKeysCommand(argv: string[], redis: KeyAdminRedis, io: KeysIo): Promise<number> {
  let parsed
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        tenant: { type: 'string' }, name: { type: 'string' }, rpm: { type: 'string' }, tpm: { type: 'string' },
        models: { type: 'string' }, priority: { type: 'string' }, json: { type: 'boolean', default: false }, help: { type: 'boolean', short: 'h' },
      },
    })
  } catch (err) {
    io.err(`keys: ${(err as Error).message}\n${KEYS_USAGE}`)
    return 2
  }
  const { values, positionals } = parsed
  const [command, ...rest] = positionals
  if (values.help || !command) {
    io.err(KEYS_USAGE)
    return values.help ? 0 : 2
  }
  try {
    switch (command) {
      case 'create': {
        if (!values.tenant) throw new UsageError('create needs --tenant')
        const { key, record } = await createKey(redis, {
          tenant: values.tenant,
          name: values.name,
          rpm: toCount('rpm', values.rpm),
          tpm: toCount('tpm', values.tpm),
          models: values.models?.split(','),
          priority: toPriorityClass(values.priority),
        })
        if (values.json) io.out(JSON.stringify({ key, ...record }))
        else {
          io.out(`id:      ${record.id}`)
          io.out(`tenant:  ${record.tenant}   rpm: ${record.rpm || 'default'}   tpm: ${record.tpm || 'default'}   models: ${record.models.join(',')}   priority: ${record.priority}`)
          io.out(`key:     ${key}`)
          io.out('This is the only time the key is shown; only its sha256 is stored.')
        }
        return 0
      }
      case 'list': {
        const keys = await listKeys(redis, { tenant: values.tenant })
        if (values.json) io.out(JSON.stringify(keys))
        else io.out(formatTable(keys))
        return 0
      }
      case 'revoke': {
        const id = rest[0]
        if (!id) throw new UsageError('revoke needs a key id (see `list`)')
        const record = await revokeKey(redis, id)
        if (!record) {
          io.err(`keys: no key with id ${id}`)
          return 1
        }
        if (values.json) io.out(JSON.stringify(record))
        else io.out(`revoked ${record.id} (tenant ${record.tenant}); edges stop accepting it within 30 s`)
        return 0
      }
      default:
        throw new UsageError(`unknown command ${command}`)
    }
  } catch (err) {
    if (err instanceof UsageError) {
      io.err(`keys: ${err.message}\n${KEYS_USAGE}`)
      return 2
    }
    io.err(`keys: ${(err as Error).message}`)
    return 1
  }
}

class UsageError extends Error {}

function toPriorityClass(value: string | undefined): PriorityClass {
  if (value === undefined) return 'interactive'
  if (!isPriorityClass(value)) throw new UsageError(`--priority must be ${PRIORITY_CLASSES.join(' or ')}`)
  return value
}

function toCount(label: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined
  if (!/^\d+$/.test(value)) throw new UsageError(`--${label} must be a whole number ≥ 0 (0 = deployment default)`)
  return Number(value)
}

function formatTable(keys: KeyListing[]): string {
  if (keys.length === 0) return '(no keys)'
  const header = ['id', 'tenant', 'name', 'rpm', 'tpm', 'models', 'priority', 'created', 'disabled', 'hash']
  const rows = keys.map((k) => [
    k.id, k.tenant, k.name || '-', k.rpm ? String(k.rpm) : 'default', k.tpm ? String(k.tpm) : 'default',
    k.models.join(','), k.priority ?? 'interactive', new Date(k.created).toISOString().replace(/\.\d{3}Z$/, 'Z'), k.disabled ? 'yes' : 'no', `${k.hashPrefix}…`,
  ])
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)))
  return [header, ...rows].map((r) => r.map((c, i) => c.padEnd(widths[i])).join('  ').trimEnd()).join('\n')
}
