// Starts (or attaches to) an agentlog stack for the tests. With AGENTLOG_NATS_URL set (the Go test
// driver typescript/dsh-persistence/npm_test.go sets it, with AGENTLOG_BIN and AGENTLOG_WRITER_BIN),
// it uses that server; otherwise it builds ./cmd/agentlog with `go build` and runs `agentlog dev` on
// a free port. The Go writer process of the race test (./integration_test/writer) is built unless
// AGENTLOG_WRITER_BIN names it.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { createServer } from 'node:net'
import type { TestProject } from 'vitest/node'

const repoRoot = resolve(import.meta.dirname, '../../..')

declare module 'vitest' {
  export interface ProvidedContext { natsUrl: string; agentlogBin: string; writerBin: string }
}

async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const srv = createServer()
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port
      srv.close(() => ok(port))
    })
    srv.on('error', fail)
  })
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let url = process.env.AGENTLOG_NATS_URL
  let bin = process.env.AGENTLOG_BIN
  let writer = process.env.AGENTLOG_WRITER_BIN
  let dev: ChildProcess | undefined
  let tmp: string | undefined
  if (!bin || !writer || !url) tmp = mkdtempSync(join(tmpdir(), 'dsh-agentlog-'))
  if (!bin) {
    bin = join(tmp!, 'agentlog')
    execFileSync('go', ['build', '-o', bin, './cmd/agentlog'], { cwd: repoRoot, stdio: 'inherit' })
  }
  if (!writer) {
    writer = join(tmp!, 'writer')
    execFileSync('go', ['build', '-o', writer, './integration_test/writer'], { cwd: repoRoot, stdio: 'inherit' })
  }
  if (!url) {
    const port = await freePort()
    dev = spawn(bin, ['dev', '--data', join(tmp!, 'data'), '--listen', `127.0.0.1:${port}`], { stdio: ['ignore', 'pipe', 'inherit'] })
    url = await new Promise<string>((ok, fail) => {
      let buf = ''
      const timer = setTimeout(() => fail(new Error('agentlog dev printed no URL within 60s')), 60_000)
      dev!.stdout!.on('data', (d: Buffer) => {
        buf += d.toString()
        const m = /listening on (\S+)/.exec(buf)
        if (m) { clearTimeout(timer); ok(m[1]!) }
      })
      dev!.on('exit', code => { clearTimeout(timer); fail(new Error(`agentlog dev exited with ${code}`)) })
    })
    dev.stdout!.resume()
  }
  project.provide('natsUrl', url)
  project.provide('agentlogBin', bin)
  project.provide('writerBin', writer)
  return async () => {
    if (dev) {
      dev.kill('SIGINT')
      await new Promise(ok => dev!.once('exit', ok))
    }
    if (tmp) rmSync(tmp, { recursive: true, force: true })
  }
}
