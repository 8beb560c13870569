/** The node URL + route join the forward signs and sends to (proxy/target-url.ts). */
import { describe, expect, it } from 'vitest'
import { targetUrl } from './target-url.ts'

describe('targetUrl', () => {
  it('joins a node URL, with or without a base path or trailing slash, and drops its query', () => {
    expect(targetUrl('http://127.0.0.1:9000', '/v1/chat/completions')).toEqual({ href: 'http://127.0.0.1:9000/v1/chat/completions', pathname: '/v1/chat/completions' })
    expect(targetUrl('https://node.example/base/', '/v1/messages')).toEqual({ href: 'https://node.example/base/v1/messages', pathname: '/base/v1/messages' })
    expect(targetUrl('https://node.example/base//?x=1', '/v1/completions')).toEqual({ href: 'https://node.example/base/v1/completions', pathname: '/base/v1/completions' })
  })

  it('answers a node and route it has seen without parsing again, and stays bounded', () => {
    const first = targetUrl('http://10.0.0.1:8000', '/v1/messages')
    expect(targetUrl('http://10.0.0.1:8000', '/v1/messages')).toBe(first)
    expect(targetUrl('http://10.0.0.1:8000', '/v1/chat/completions')).not.toBe(first)
    // Past the bound the cache starts over; answers stay right.
    for (let i = 0; i < 1100; i++) targetUrl(`http://10.0.${i >> 8}.${i & 255}:8000`, '/v1/messages')
    expect(targetUrl('http://10.0.0.1:8000', '/v1/messages')).toEqual(first)
  })
})
