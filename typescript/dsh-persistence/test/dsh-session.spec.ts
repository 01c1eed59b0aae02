// A real dsh session: a scripted session driven through dsh's own SessionStore, persisted by the
// plugin through the coordinator's 200 ms window, then read by the Go stack (`agentlog messages`,
// `agentlog events`) and reloaded by a fresh plugin instance.
import { expect, it } from 'vitest'
import { Context } from '@deepseek-ai/cordis'
import SessionStore, { SessionId } from '@deepseek-ai/dsh-session'
import AgentlogSessionPersistence from '../src/index.ts'
import { agentlog, agentlogConfig, uniqueId } from './stack.ts'
import { readJsonl } from './jsonl.ts'
import { runScriptedSession } from './script.ts'

it('a scripted dsh session is persisted through the plugin and read back by agentlog messages', async () => {
  const id = uniqueId('dsh-live')
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  const fiber = await ctx.plugin(AgentlogSessionPersistence, agentlogConfig())
  const session = ctx.sessions.create(SessionId(id), { meta: { cwd: '/work/demo' } })
  const derived = await runScriptedSession(session)
  const events = JSON.parse(JSON.stringify(session.events))
  // Dispose drains the write-behind buffers, then drains the NATS connection.
  await fiber.dispose()

  expect(derived).toHaveLength(6)
  const messages = JSON.parse(await agentlog('messages', id))
  expect(messages).toEqual(derived)
  const text = await agentlog('events', id)
  const { header, events: goEvents } = readJsonl(text)
  expect(header).toMatchObject({ type: 'session', version: 0, id, cwd: '/work/demo', delegationDepth: 0 })
  expect(goEvents).toEqual(events)

  // Several records: the live path wrote window by window, not one record at the end.
  const ctx2 = new Context()
  await ctx2.plugin(SessionStore)
  const fiber2 = await ctx2.plugin(AgentlogSessionPersistence, agentlogConfig())
  try {
    const loaded = await ctx2.sessionPersistence.load(SessionId(id))
    expect(loaded.events).toEqual(events)
    const rev = await (ctx2.sessionPersistence as AgentlogSessionPersistence).readStoredRevision(SessionId(id))
    expect(Number(String(rev).split(':').at(-1))).toBeGreaterThan(1)
  } finally {
    await fiber2.dispose()
  }
})
