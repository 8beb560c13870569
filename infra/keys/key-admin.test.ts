import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { Redis } from '@upstash/redis'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { apiKeyRedisKey, hashApiKey, isWellFormedApiKey, parseApiKeyRecord } from '../../shared/src/api-key.ts'
import { startLocalUpstash, type LocalUpstash } from '../local/local-upstash.ts'
import { RespConnection } from '../local/redis-client.ts'
import { createKey, KEY_ID_INDEX, listKeys, revokeKey, seedKey } from './key-admin.ts'
import { runKeysCommand } from './keys-command.ts'

let up: LocalUpstash
let clients: Record<'default' | 'raw strings', Redis>

beforeAll(async () => {
  up = await startLocalUpstash()
  const base = { url: up.restUrl, token: up.restToken, enableTelemetry: false }
  clients = { default: new Redis(base), 'raw strings': new Redis({ ...base, automaticDeserialization: false }) }
})
afterAll(async () => {
  await up?.stop()
})
beforeEach(async () => {
  await clients.default.flushdb()
})

/** Every key, field and value in Redis as one string, read around the bridge. */
async function dumpRedis(): Promise<string> {
  const conn = await RespConnection.connect({ host: '127.0.0.1', port: up.redis.port })
  const keys = (await conn.send(['KEYS', '*'])) as Buffer[]
  const hashes = await conn.sendBatch(keys.map((k) => ['HGETALL', k]))
  conn.close()
  return keys.map((k, i) => `${k} ${(hashes[i] as Buffer[]).join(' ')}`).join('\n')
}

function capture() {
  const out: string[] = []
  const err: string[] = []
  return { out, err, io: { out: (l: string) => out.push(l), err: (l: string) => err.push(l) } }
}

describe.each(['default', 'raw strings'] as const)('key admin (%s client)', (clientName) => {
  const redis = () => clients[clientName]

  it('stores a new key only by its hash, with an id index', async () => {
    const { key, record } = await createKey(redis(), { tenant: 'acme', name: 'ci', rpm: 60, tpm: 90_000, models: ['tiny', 'small'] })
    expect(isWellFormedApiKey(key)).toBe(true)
    const hash = await hashApiKey(key)
    const dump = await dumpRedis()
    expect(dump).not.toContain(key)
    expect(dump).not.toContain(key.slice(3))
    const stored = parseApiKeyRecord(await clients.default.hgetall(apiKeyRedisKey(hash)))
    expect(stored).toEqual({ ...record, rpm: 60, tpm: 90_000, models: ['tiny', 'small'], disabled: false })
    expect(await clients['raw strings'].hget(KEY_ID_INDEX, record.id)).toBe(hash)
  })

  it('lists keys without the key and with only a short hash prefix', async () => {
    const a = await createKey(redis(), { tenant: 'acme' })
    const b = await createKey(redis(), { tenant: 'other', name: 'second' })
    const all = await listKeys(redis())
    expect(all.map((k) => k.id).sort()).toEqual([a.record.id, b.record.id].sort())
    const acme = await listKeys(redis(), { tenant: 'acme' })
    expect(acme).toHaveLength(1)
    expect(acme[0]).toMatchObject({ id: a.record.id, tenant: 'acme', models: ['*'], rpm: 0, tpm: 0, disabled: false })
    expect(acme[0].hashPrefix).toBe((await hashApiKey(a.key)).slice(0, 8))

    const table = capture()
    expect(await runKeysCommand(['list'], redis(), table.io)).toBe(0)
    const json = capture()
    expect(await runKeysCommand(['list', '--json'], redis(), json.io)).toBe(0)
    for (const printed of [table.out.join('\n'), json.out.join('\n')]) {
      expect(printed).toContain(a.record.id)
      expect(printed).toContain(b.record.id)
      for (const { key } of [a, b]) {
        expect(printed).not.toContain(key.slice(3))
        expect(printed).not.toContain(await hashApiKey(key))
      }
    }
    expect(table.out.join('\n').split('\n')[0]).toMatch(/^id\s+tenant\s+name\s+rpm\s+tpm\s+models\s+priority\s+created\s+disabled\s+hash$/)
  })

  it('revokes a key by id: the stored record says disabled', async () => {
    const { key, record } = await createKey(redis(), { tenant: 'acme' })
    const io = capture()
    expect(await runKeysCommand(['revoke', record.id], redis(), io.io)).toBe(0)
    expect(io.out.join('\n')).toContain(`revoked ${record.id}`)
    const stored = parseApiKeyRecord(await clients.default.hgetall(apiKeyRedisKey(await hashApiKey(key))))
    expect(stored?.disabled).toBe(true)
    expect((await listKeys(redis()))[0].disabled).toBe(true)
    expect(await revokeKey(redis(), 'key_doesnotexist')).toBeUndefined()
    const missing = capture()
    expect(await runKeysCommand(['revoke', 'key_doesnotexist'], redis(), missing.io)).toBe(1)
  })

  it('seeds the dev key idempotently', async () => {
    const devKey = 'zl-devlocalkey000000000000000000000'
    await seedKey(redis(), devKey, { tenant: 'dev', rpm: 100_000, tpm: 100_000_000 })
    const seeded = await seedKey(redis(), devKey, { tenant: 'dev', rpm: 100_000, tpm: 100_000_000 })
    const keys = await listKeys(redis())
    expect(keys).toHaveLength(1)
    expect(keys[0]).toMatchObject({ id: seeded.id, tenant: 'dev', rpm: 100_000, tpm: 100_000_000, disabled: false })
    expect(parseApiKeyRecord(await clients.default.hgetall(apiKeyRedisKey(await hashApiKey(devKey))))?.tenant).toBe('dev')
  })
})

describe('keys command', () => {
  it('prints a created key once, with its id', async () => {
    const io = capture()
    expect(await runKeysCommand(['create', '--tenant', 'acme', '--rpm', '60', '--models', 'tiny'], clients.default, io.io)).toBe(0)
    const text = io.out.join('\n')
    const key = /key:\s+(zl-[0-9A-Za-z]{32})/.exec(text)?.[1]
    const id = /id:\s+(key_\w+)/.exec(text)?.[1]
    expect(key && id).toBeTruthy()
    expect(text.split(key!).length).toBe(2)
    expect((await listKeys(clients.default))[0]).toMatchObject({ id, rpm: 60, models: ['tiny'], priority: 'interactive' })
  })

  it('creates a batch key: its stored record says so', async () => {
    const io = capture()
    expect(await runKeysCommand(['create', '--tenant', 'jobs', '--priority', 'batch', '--json'], clients.default, io.io)).toBe(0)
    const { key } = JSON.parse(io.out.join('')) as { key: string }
    expect(parseApiKeyRecord(await clients.default.hgetall(apiKeyRedisKey(await hashApiKey(key))))?.priority).toBe('batch')
  })

  it('rejects bad input with usage and exit code 2', async () => {
    for (const argv of [[], ['create'], ['create', '--tenant', '9lives'], ['create', '--tenant', 'a', '--rpm', '-1'], ['create', '--tenant', 'a', '--priority', 'urgent'], ['revoke'], ['explode']]) {
      const io = capture()
      expect(await runKeysCommand(argv, clients.default, io.io)).toBe(argv[0] === 'create' && argv[2] === '9lives' ? 1 : 2)
      expect(io.err.join('\n')).toMatch(argv.includes('urgent') ? /--priority must be interactive or batch/ : /usage|tenant must start/)
    }
  })

  it('runs as `npm run keys` does, against UPSTASH_REDIS_REST_URL', async () => {
    const run = (args: string[]) => promisify(execFile)(process.execPath, ['--import', 'tsx', 'infra/keys/cli.ts', ...args], {
      env: { ...process.env, UPSTASH_REDIS_REST_URL: up.restUrl, UPSTASH_REDIS_REST_TOKEN: up.restToken },
    })
    const created = JSON.parse((await run(['create', '--tenant', 'cli', '--json'])).stdout)
    expect(isWellFormedApiKey(created.key)).toBe(true)
    const listed = (await run(['list', '--tenant', 'cli'])).stdout
    expect(listed).toContain(created.id)
    expect(listed).not.toContain(created.key)
    expect((await run(['revoke', created.id])).stdout).toContain('revoked')
  })
})
