// Resuming a stored session in dsh (the README's "Resuming a stored session"): a session the Go
// stack stored (agentlog import) is prepared by the plugin, entered into dsh's SessionStore and
// written on; the Go stack reads the continuation. A header cwd that is not an absolute path (the
// recorded sessions' "{{cwd}}/workspace") is refused by dsh's restore, and `agentlog import --cwd`
// is the fix.
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { expect, it } from 'vitest'
import { Context } from '@deepseek-ai/cordis'
import { MessageId, freezeMessage } from '@deepseek-ai/dsh-llm'
import SessionStore, { SessionId } from '@deepseek-ai/dsh-session'
import AgentlogSessionPersistence from '../src/index.ts'
import { readJsonl } from './jsonl.ts'
import { agentlog, agentlogConfig, agentlogResult, uniqueId } from './stack.ts'

/** The README's code: resume session id in dsh and append one more turn to it. */
async function resumeAndContinue(id: string): Promise<void> {
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  const fiber = await ctx.plugin(AgentlogSessionPersistence, { servers: agentlogConfig().servers })
  try {
    // load() only inspects a stored session; prepare() builds the dsh Session of its log (crash
    // repair committed), and enter() + announce() make it live, its appends persisted again.
    using prepared = await ctx.sessionPersistence.prepare(SessionId(id))
    const session = prepared.session
    const detach = ctx.sessions.enter(session)
    ctx.sessions.announce(session)
    const turn = Math.max(0, ...session.events.filter(e => e.type === 'turn/start').map(e => (e.data as { turn: number }).turn)) + 1
    const s = session as any
    s.append('turn/start', { turn })
    s.append('user/message', freezeMessage({
      id: MessageId(`resumed-${turn}`), role: 'user', content: [{ type: 'text', text: 'resumed from agentlog' }], source: { kind: 'user' },
    } as any), { surfaceOp: 'append' })
    s.append('turn/end', { turn, reason: { kind: 'completed' } })
    await ctx.sessions.flush(session)
    detach()
  } finally {
    await fiber.dispose()
  }
}

const log = (id: string, cwd: string) => [
  { type: 'session', version: 0, id, createdAt: 1784998084454, cwd },
  { type: 'turn/start', seq: 0, time: 1784998084454, data: { turn: 1 } },
  { type: 'user/message', seq: 1, time: 1784998084455, data: { id: 'm1', role: 'user', content: [{ type: 'text', text: 'hello' }], source: { kind: 'user' } }, surfaceOp: 'append' },
  { type: 'turn/end', seq: 2, time: 1784998084456, data: { turn: 1, reason: { kind: 'completed' } } },
].map(l => JSON.stringify(l) + '\n').join('')

it('a session stored by the Go stack is resumed in dsh (prepare, enter, announce) and written on', async () => {
  const id = uniqueId('resume')
  const file = join(mkdtempSync(join(tmpdir(), 'dsh-resume-')), 'log.jsonl')
  writeFileSync(file, log(id, '/work/project'))
  await agentlog('import', file)
  await resumeAndContinue(id)
  const { header, events } = readJsonl(await agentlog('events', id))
  expect(header).toMatchObject({ id, cwd: '/work/project' })
  // dsh marks where the resumed lifecycle's writes begin, as the Go publisher's Open does.
  expect(events.map(e => e.type)).toEqual(['turn/start', 'user/message', 'turn/end', 'session/end-seed', 'turn/start', 'user/message', 'turn/end'])
  expect(events.map(e => e.seq)).toEqual([0, 1, 2, 3, 4, 5, 6])
  const messages = JSON.parse(await agentlog('messages', id))
  expect(messages.map((m: any) => m.content[0].text)).toEqual(['hello', 'resumed from agentlog'])
})

it('a header cwd dsh cannot restore is warned about by import, refused by dsh, and fixed with import --cwd', async () => {
  const recorded = join(import.meta.dirname, '../../../../shared/data/dsh-sessions/apps_web__goal-multi-turn-actions_session.jsonl')
  const file = join(mkdtempSync(join(tmpdir(), 'dsh-cwd-')), 'log.jsonl')
  const rel = uniqueId('relative-cwd')
  writeFileSync(file, existsSync(recorded) ? readFileSync(recorded) : log(rel, '{{cwd}}/workspace'))
  const r = await agentlogResult('import', file, '--session', rel)
  expect(r.code).toBe(0)
  expect(r.stderr).toContain('is not an absolute path, so dsh cannot restore the session')
  await expect(resumeAndContinue(rel)).rejects.toThrow(/cwd must be an absolute path, got "\{\{cwd\}\}/)

  const abs = uniqueId('absolute-cwd')
  await agentlog('import', file, '--session', abs, '--cwd', '/tmp/workspace')
  await resumeAndContinue(abs)
  const { header, events } = readJsonl(await agentlog('events', abs))
  expect(header).toMatchObject({ cwd: '/tmp/workspace' })
  expect(events.at(-2)?.type).toBe('user/message')
}, 120_000)
