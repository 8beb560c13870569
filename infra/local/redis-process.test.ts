import net from 'node:net'
import { existsSync, readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { RespConnection } from './redis-client.ts'
import { findRedisServer, freePort, startRedis } from './redis-process.ts'

async function ping(port: number): Promise<unknown> {
  const conn = await RespConnection.connect({ host: '127.0.0.1', port }, 500)
  try {
    return await conn.send(['PING'])
  } finally {
    conn.close()
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe('redis-server child process', () => {
  it('starts on a free port without persistence, answers PING, and stops', async () => {
    const redis = await startRedis({ port: 0 })
    try {
      expect(redis.url).toBe(`redis://127.0.0.1:${redis.port}`)
      expect(await ping(redis.port)).toBe('PONG')
      const conn = await RespConnection.connect({ host: '127.0.0.1', port: redis.port })
      const [save, aof] = await conn.sendBatch([['CONFIG', 'GET', 'save'], ['CONFIG', 'GET', 'appendonly']])
      conn.close()
      expect((save as Buffer[])[1].toString()).toBe('')
      expect((aof as Buffer[])[1].toString()).toBe('no')
    } finally {
      await redis.stop()
    }
    expect(processAlive(redis.pid)).toBe(false)
    await expect(ping(redis.port)).rejects.toThrow()
  })

  it('says the port is in use instead of hanging', async () => {
    const port = await freePort()
    const blocker = net.createServer()
    await new Promise<void>((resolve) => blocker.listen(port, '127.0.0.1', resolve))
    try {
      await expect(startRedis({ port })).rejects.toThrow(`127.0.0.1:${port} is already in use`)
    } finally {
      blocker.close()
    }
  })

  it('says how to install redis-server when the binary is missing', async () => {
    expect(() => findRedisServer('/nonexistent/redis-server')).toThrow('install it: apt-get install -y redis-server')
    await expect(startRedis({ port: 0, binary: 'no-such-redis-server-binary' })).rejects.toThrow('apt-get install -y redis-server')
    expect(existsSync(findRedisServer())).toBe(true)
  })
})

describe('freePort', () => {
  it('hands out distinct bindable ports below the ephemeral range that outgoing connections use', async () => {
    const ephemeralFrom = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0])
    const ports = await Promise.all(Array.from({ length: 20 }, () => freePort()))
    for (const port of ports) {
      expect(port).toBeGreaterThanOrEqual(10_000)
      expect(port).toBeLessThan(ephemeralFrom)
    }
    expect(new Set(ports).size).toBeGreaterThan(15)
    const server = net.createServer()
    await new Promise<void>((resolve, reject) => server.once('error', reject).listen(ports[0], '127.0.0.1', resolve))
    await new Promise<void>((resolve) => server.close(() => resolve()))
  })
})

