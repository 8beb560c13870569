/**
 * A throwaway self-signed certificate for 127.0.0.1/localhost, made with openssl at test time
 * (Debian ships it); TLS listeners in tests use it. Nothing is committed.
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export interface TestCert {
  certFile: string
  keyFile: string
  cert: string
  key: string
  remove(): void
}

export function makeSelfSignedCert(): TestCert {
  const dir = mkdtempSync(join(tmpdir(), 'zl-tls-'))
  const certFile = join(dir, 'cert.pem')
  const keyFile = join(dir, 'key.pem')
  try {
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
      '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost',
      '-keyout', keyFile, '-out', certFile,
    ], { stdio: 'ignore' })
  } catch (e) {
    rmSync(dir, { recursive: true, force: true })
    throw new Error(`TLS tests need openssl to make a certificate (apt-get install -y openssl): ${(e as Error).message}`)
  }
  return { certFile, keyFile, cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8'), remove: () => rmSync(dir, { recursive: true, force: true }) }
}
