// A scripted dsh session (no model, no API key) persisted in agentlog through
// @agentlog/dsh-session-persistence. Start `agentlog dev` first, then:
//   AGENTLOG_NATS_URL=nats://127.0.0.1:4222 npm start
// and read the session back with `agentlog messages <id>` / `agentlog events <id>`.
import { Context } from '@deepseek-ai/cordis'
import SessionStore, { SessionId } from '@deepseek-ai/dsh-session'
import { CallId, MessageId, freezeMessage } from '@deepseek-ai/dsh-llm'
import AgentlogSessionPersistence from '@agentlog/dsh-session-persistence'

const servers = process.env.AGENTLOG_NATS_URL ?? 'nats://127.0.0.1:4222'
const id = process.argv[2] ?? `dsh-agent-${Date.now()}`
const sleep = ms => new Promise(ok => setTimeout(ok, ms))

const ctx = new Context()
await ctx.plugin(SessionStore)
// What a cordis.yml entry `@agentlog/dsh-session-persistence: { servers: ... }` does.
const fiber = await ctx.plugin(AgentlogSessionPersistence, { servers, name: 'dsh-agent-example' })

const session = ctx.sessions.create(SessionId(id), { meta: { cwd: process.cwd() } })
const model = { kind: 'model', provider: 'scripted', model: 'scripted-1' }
async function stream(turn, step, text) {
  session.append('assistant/chunk', { turn, step, chunk: { type: 'block-start', index: 0, blockType: 'text' } })
  for (const word of text.split(/(?<= )/)) {
    session.append('assistant/chunk', { turn, step, chunk: { type: 'text-delta', index: 0, text: word } })
    await sleep(40) // a model streaming: the 200 ms write-behind window batches these
  }
  session.append('assistant/chunk', { turn, step, chunk: { type: 'block-end', index: 0 } })
}

session.append('turn/start', { turn: 1 })
session.append('user/message', freezeMessage({
  id: MessageId('u1'), role: 'user', content: [{ type: 'text', text: 'What is the time in UTC?' }], source: { kind: 'user' },
}), { surfaceOp: 'append' })
session.append('step/start', { turn: 1, step: 1 })
await stream(1, 1, 'Let me check the clock. ')
const call = CallId('call-1')
session.append('assistant/message', {
  turn: 1, step: 1,
  message: freezeMessage({ id: MessageId('a1'), role: 'assistant', source: model,
    content: [{ type: 'text', text: 'Let me check the clock. ' }, { type: 'tool-call', id: call, name: 'clock', arguments: '{}' }] }),
}, { surfaceOp: 'append' })
session.append('tool/call', { turn: 1, step: 1, callId: call, name: 'clock', arguments: '{}' })
session.append('tool/result', {
  turn: 1, step: 1,
  message: freezeMessage({ id: MessageId('t1'), role: 'user', source: { kind: 'tool', callId: call },
    content: [{ type: 'tool-result', toolCallId: call, content: [{ type: 'text', text: new Date().toISOString() }] }] }),
}, { surfaceOp: 'append' })
session.append('step/end', { turn: 1, step: 1 })
session.append('step/start', { turn: 1, step: 2 })
await stream(1, 2, 'It is about now, in UTC. ')
session.append('assistant/message', {
  turn: 1, step: 2,
  message: freezeMessage({ id: MessageId('a2'), role: 'assistant', source: model, content: [{ type: 'text', text: 'It is about now, in UTC. ' }] }),
}, { surfaceOp: 'append' })
session.append('step/end', { turn: 1, step: 2 })
session.append('turn/end', { turn: 1, reason: { kind: 'completed' } })

await ctx.sessions.flush(session) // the durability checkpoint
console.log(`session ${id}: ${session.events.length} events, ${session.deriveMessages().length} messages; durable in agentlog`)
console.log(`read it back:  agentlog --nats ${servers} messages ${id}`)
await fiber.dispose() // drains the write-behind buffers, then the NATS connection
