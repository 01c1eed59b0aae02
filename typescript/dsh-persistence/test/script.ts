// A scripted dsh session (no model, no API key): two turns, streamed text, one tool call and its
// result, appended through dsh's own Session API with pauses, so that the coordinator's write-behind
// window batches them as a live agent's would. Shared by the test and examples/dsh-agent.
import { CallId, MessageId, freezeMessage } from '@deepseek-ai/dsh-llm'
import type { Session } from '@deepseek-ai/dsh-session'

const sleep = (ms: number) => new Promise(ok => setTimeout(ok, ms))

/** Run the script on a live session; resolves with what dsh derives for the model. */
export async function runScriptedSession(session: Session, pauseMs = 30): Promise<unknown[]> {
  const s = session as any
  const model = { kind: 'model', provider: 'scripted', model: 'scripted-1' }
  const say = async (turn: number, step: number, text: string) => {
    s.append('assistant/chunk', { turn, step, chunk: { type: 'block-start', index: 0, blockType: 'text' } })
    for (const word of text.split(/(?<= )/)) {
      s.append('assistant/chunk', { turn, step, chunk: { type: 'text-delta', index: 0, text: word } })
      await sleep(pauseMs)
    }
    s.append('assistant/chunk', { turn, step, chunk: { type: 'block-end', index: 0 } })
  }

  // Turn 1: a question, a tool call, its result, an answer.
  s.append('turn/start', { turn: 1 })
  s.append('user/message', freezeMessage({
    id: MessageId('u1'), role: 'user', content: [{ type: 'text', text: 'What is in README.md?' }], source: { kind: 'user' },
  } as any), { surfaceOp: 'append' })
  s.append('step/start', { turn: 1, step: 1 })
  await say(1, 1, 'Let me read it. ')
  const call = CallId('call-1')
  s.append('assistant/message', {
    turn: 1, step: 1,
    message: freezeMessage({
      id: MessageId('a1'), role: 'assistant', source: model,
      content: [{ type: 'text', text: 'Let me read it. ' }, { type: 'tool-call', id: call, name: 'read', arguments: '{"path":"README.md"}' }],
    } as any),
  }, { surfaceOp: 'append' })
  s.append('tool/call', { turn: 1, step: 1, callId: call, name: 'read', arguments: '{"path":"README.md"}' })
  await sleep(pauseMs * 3)
  s.append('tool/result', {
    turn: 1, step: 1,
    message: freezeMessage({
      id: MessageId('t1'), role: 'user', source: { kind: 'tool', callId: call },
      content: [{ type: 'tool-result', toolCallId: call, content: [{ type: 'text', text: '# agentlog\nA durable session log.' }] }],
    } as any),
  }, { surfaceOp: 'append' })
  s.append('step/end', { turn: 1, step: 1 })
  s.append('step/start', { turn: 1, step: 2 })
  await say(1, 2, 'It says agentlog is a durable session log. ')
  s.append('assistant/message', {
    turn: 1, step: 2,
    message: freezeMessage({ id: MessageId('a2'), role: 'assistant', source: model, content: [{ type: 'text', text: 'It says agentlog is a durable session log. ' }] } as any),
    usage: { inputTokens: 42, outputTokens: 9 },
  }, { surfaceOp: 'append' })
  s.append('step/end', { turn: 1, step: 2 })
  s.append('turn/end', { turn: 1, reason: { kind: 'completed' } })

  // Turn 2: a follow-up.
  await sleep(pauseMs * 3)
  s.append('turn/start', { turn: 2 })
  s.append('user/message', freezeMessage({ id: MessageId('u2'), role: 'user', content: [{ type: 'text', text: 'Thanks!' }], source: { kind: 'user' } } as any), { surfaceOp: 'append' })
  s.append('step/start', { turn: 2, step: 1 })
  await say(2, 1, 'You are welcome. ')
  s.append('assistant/message', {
    turn: 2, step: 1,
    message: freezeMessage({ id: MessageId('a3'), role: 'assistant', source: model, content: [{ type: 'text', text: 'You are welcome. ' }] } as any),
  }, { surfaceOp: 'append' })
  s.append('step/end', { turn: 2, step: 1 })
  s.append('turn/end', { turn: 2, reason: { kind: 'completed' } })
  return JSON.parse(JSON.stringify(session.deriveMessages()))
}
