import { describe, expect, it } from 'vitest'
import { encodeCommand, RedisError, RespParser, type RespReply } from './resp-codec.ts'

const WIRE = Buffer.concat([
  Buffer.from('+OK\r\n-ERR boom\r\n:42\r\n:-7\r\n$-1\r\n*-1\r\n$0\r\n\r\n'),
  Buffer.from('$3\r\n'), Buffer.from([0xff, 0x00, 0x0d]), Buffer.from('\r\n'),
  Buffer.from('*3\r\n$1\r\na\r\n*2\r\n:1\r\n$-1\r\n-WRONGTYPE nested\r\n'),
])

function expectWireReplies(replies: RespReply[]): void {
  expect(replies).toHaveLength(9)
  expect(replies[0]).toBe('OK')
  expect(replies[1]).toBeInstanceOf(RedisError)
  expect((replies[1] as RedisError).message).toBe('ERR boom')
  expect(replies.slice(2, 6)).toEqual([42, -7, null, null])
  expect(replies[6]).toEqual(Buffer.alloc(0))
  expect(replies[7]).toEqual(Buffer.from([0xff, 0x00, 0x0d]))
  const nested = replies[8] as RespReply[]
  expect(nested[0]).toEqual(Buffer.from('a'))
  expect(nested[1]).toEqual([1, null])
  expect((nested[2] as RedisError).message).toBe('WRONGTYPE nested')
}

describe('RESP2 codec', () => {
  it('encodes commands as arrays of binary-safe bulk strings', () => {
    expect(encodeCommand(['SET', 'k', 'é']).toString('latin1')).toBe('*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n\xc3\xa9\r\n')
    expect(encodeCommand([Buffer.from([0, 13, 10])])).toEqual(Buffer.from([0x2a, 0x31, 13, 10, 0x24, 0x33, 13, 10, 0, 13, 10, 13, 10]))
  })

  it('parses every reply type from one chunk', () => {
    expectWireReplies(new RespParser().push(WIRE))
  })

  it('parses the same replies when they arrive one byte at a time', () => {
    const parser = new RespParser()
    const replies: RespReply[] = []
    for (const byte of WIRE) replies.push(...parser.push(Buffer.from([byte])))
    expectWireReplies(replies)
  })

  it('waits for the whole of a large bulk string split across chunks', () => {
    const value = Buffer.alloc(1_000_000, 0x61)
    const wire = Buffer.concat([Buffer.from(`$${value.length}\r\n`), value, Buffer.from('\r\n:1\r\n')])
    const parser = new RespParser()
    const replies: RespReply[] = []
    for (let i = 0; i < wire.length; i += 65_536) replies.push(...parser.push(wire.subarray(i, i + 65_536)))
    expect(replies).toHaveLength(2)
    expect((replies[0] as Buffer).equals(value)).toBe(true)
    expect(replies[1]).toBe(1)
  })
})
