// The opt-in metrics (config.metrics): the Go publisher's names, served on /metrics, counting
// what the plugin wrote.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { expect, it } from 'vitest'
import { Context } from '@deepseek-ai/cordis'
import SessionStore, { SessionId } from '@deepseek-ai/dsh-session'
import AgentlogSessionPersistence from '../src/index.ts'
import { agentlogConfig, uniqueId } from './stack.ts'
import { runScriptedSession } from './script.ts'

/** The sample values of a Prometheus text exposition, by series (name and labels). */
function samples(text: string): Map<string, number> {
  const out = new Map<string, number>()
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const i = line.lastIndexOf(' ')
    out.set(line.slice(0, i), Number(line.slice(i + 1)))
  }
  return out
}

it('metrics are off by default', async () => {
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  const fiber = await ctx.plugin(AgentlogSessionPersistence, agentlogConfig())
  expect((ctx.sessionPersistence as AgentlogSessionPersistence).metrics).toBeUndefined()
  await fiber.dispose()
})

it('with metrics.listen, /metrics has the Go publisher\'s metrics, counting what was written', async () => {
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  const fiber = await ctx.plugin(AgentlogSessionPersistence, agentlogConfig({ metrics: { listen: '127.0.0.1:0' } }))
  const backend = ctx.sessionPersistence as AgentlogSessionPersistence
  const addr = await backend.metrics!.address()
  const session = ctx.sessions.create(SessionId(uniqueId('metrics')), { meta: { cwd: '/work/demo' } })
  await runScriptedSession(session, 30) // pauses: several windows, several records
  await ctx.sessions.flush(session)
  const n = session.events.length
  const text = await (await fetch(`http://${addr}/metrics`)).text()
  await fiber.dispose()

  // The same names as the Go publisher's (publisher/metrics.go).
  const goSource = readFileSync(join(import.meta.dirname, '../../../publisher/metrics.go'), 'utf8')
  const goNames = new Set([...goSource.matchAll(/"(agentlog_publisher_[a-z_]+)"/g)].map(m => m[1]!))
  const ours = new Set([...text.matchAll(/^# TYPE (agentlog_publisher_[a-z_]+) /gm)].map(m => m[1]!))
  expect([...ours].sort()).toEqual([...goNames].sort())

  const v = samples(text)
  expect(v.get('agentlog_publisher_appended_events_total')).toBe(n)
  expect(v.get('agentlog_publisher_appended_records_total')).toBeGreaterThanOrEqual(1)
  expect(v.get('agentlog_publisher_appended_bytes_total')).toBeGreaterThan(1000)
  expect(v.get('agentlog_publisher_write_duration_seconds_count')).toBe(v.get('agentlog_publisher_appended_records_total'))
  expect(v.get('agentlog_publisher_write_failures_total{kind="conflict"}')).toBe(0)
  expect(v.get('agentlog_publisher_pending_events')).toBe(0)
  expect(v.get('agentlog_publisher_writers')).toBeGreaterThanOrEqual(0)
})
