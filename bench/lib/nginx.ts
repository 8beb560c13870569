/**
 * nginx (Debian's nginx-light) as the absolute floor of a reverse proxy on this machine: one
 * worker, keep-alive to one upstream, no buffering (SSE passes frame by frame), no logs. Started
 * with its own prefix and config in a temporary directory, in the foreground, on 127.0.0.1.
 * `nginxBinary()` is undefined when nginx is not installed: the bench then skips it with a note
 * (the edge section installs nginx-light when it runs as root: bench/lib/system-packages.ts).
 */
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort } from '../../infra/local/redis-process.ts'
import { spawnProc, waitUntil } from './procs.ts'
import type { EdgeProc } from './services.ts'

const CANDIDATES = ['/usr/sbin/nginx', '/usr/bin/nginx', '/usr/local/sbin/nginx', '/usr/local/bin/nginx']

export function nginxBinary(): string | undefined {
  return CANDIDATES.find((p) => existsSync(p))
}

export async function startNginx(upstreamUrl: string, opts: { cpus?: string } = {}): Promise<EdgeProc> {
  const bin = nginxBinary()
  if (!bin) throw new Error('nginx is not installed (apt-get install -y nginx-light)')
  const dir = mkdtempSync(join(tmpdir(), 'zl-bench-nginx-'))
  for (const sub of ['logs', 'tmp']) mkdirSync(join(dir, sub))
  const port = await freePort()
  const upstream = new URL(upstreamUrl)
  writeFileSync(join(dir, 'nginx.conf'), [
    'worker_processes 1;',
    'daemon off;',
    'master_process off;',
    `pid ${join(dir, 'nginx.pid')};`,
    'error_log stderr warn;',
    'events { worker_connections 1024; }',
    'http {',
    '  access_log off;',
    `  client_body_temp_path ${join(dir, 'tmp')};`,
    `  proxy_temp_path ${join(dir, 'tmp')};`,
    '  client_max_body_size 2m;',
    '  client_body_buffer_size 1m;',
    `  upstream up { server ${upstream.host}; keepalive 128; }`,
    '  server {',
    `    listen 127.0.0.1:${port};`,
    '    location / {',
    '      proxy_pass http://up;',
    '      proxy_http_version 1.1;',
    '      proxy_set_header Connection "";',
    '      proxy_buffering off;',
    '      proxy_request_buffering on;',
    '    }',
    '  }',
    '}',
    '',
  ].join('\n'))
  // master_process off: the one process that serves is the one started (and pinned, and stopped).
  const proc = spawnProc('nginx', bin, ['-p', dir, '-c', join(dir, 'nginx.conf')], { ...(opts.cpus ? { cpus: opts.cpus } : {}) })
  const url = `http://127.0.0.1:${port}`
  try {
    await Promise.race([
      waitUntil('nginx', async () => (await fetch(`${url}/`, { method: 'POST', body: '{}', signal: AbortSignal.timeout(2000) })).status > 0, 20_000),
      proc.exited.then((code) => {
        throw new Error(`nginx exited (code ${code}); last output:\n${proc.tail()}`)
      }),
    ])
  } catch (e) {
    await proc.stop()
    throw e
  }
  return { url, proc, stop: () => proc.stop() }
}
