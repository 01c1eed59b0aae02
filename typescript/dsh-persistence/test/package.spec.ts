// `npm pack` gives a working package: it builds lib/ (prepare), ships lib/*.js and the .d.ts files,
// and the built entry point is the cordis plugin.
import { execFileSync } from 'node:child_process'
import { expect, it } from 'vitest'
import { Context } from '@deepseek-ai/cordis'
import SessionStore from '@deepseek-ai/dsh-session'
import { SessionPersistence } from '@deepseek-ai/dsh-session-persistence'
import { agentlogConfig } from './stack.ts'

it('npm pack ships the built plugin and its types', async () => {
  const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--loglevel=error'], { cwd: import.meta.dirname + '/..', encoding: 'utf8' })
  const files = (JSON.parse(out.slice(out.indexOf('['))) as { files: { path: string }[] }[])[0]!.files.map(f => f.path).sort()
  expect(files).toEqual(expect.arrayContaining(['lib/index.js', 'lib/index.d.ts', 'lib/wire.js', 'lib/wire.d.ts', 'package.json', 'README.md']))
  expect(files.filter(f => f.startsWith('src/') || f.startsWith('test/'))).toEqual([])
  const mod = await import('../lib/index.js')
  expect(mod.default.prototype).toBeInstanceOf(SessionPersistence)
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  const fiber = await ctx.plugin(mod.default, agentlogConfig())
  expect(Array.isArray(await ctx.sessionPersistence.list())).toBe(true)
  await fiber.dispose()
}, 120_000)
