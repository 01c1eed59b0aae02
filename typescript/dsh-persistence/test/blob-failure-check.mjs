// As the user TS_USER/TS_PASS on NATS_URL (no TLS): loads session TS_READ, whose seq 1 is an offloaded
// user message of 2 MiB of "x", then writes such an event into session TS_SESSION while the
// AGENTLOG_BLOBS stream is full, and prints "ok" when the load gives the text back and the write
// fails naming the session and the seq with the server's reason ("maximum bytes exceeded").
// deploy/multi-tenant's TestAgentBlobs runs it as the agent role, and checks the server refused it
// nothing (no purge of the stream). With TS_WRITE=id it instead writes session id whose seq 1 is
// a user message of 3 MiB of "y" (offloaded), loads it back, and prints "ok" (the Go side then
// reads it: TS writer, Go reader).
//
//   NATS_URL=nats://... TS_USER=agent TS_PASS=pw TS_READ=id TS_SESSION=id node test/blob-failure-check.mjs
// Needs `npm ci` (the built lib/).
import { Context } from '@deepseek-ai/cordis'
import SessionStore, { SessionId } from '@deepseek-ai/dsh-session'
import AgentlogSessionPersistence from '../lib/index.js'

const env = k => {
  const v = process.env[k]
  if (!v) throw new Error(`blob-failure-check: ${k} is not set`)
  return v
}
const id = env('TS_SESSION')
const ctx = new Context()
await ctx.plugin(SessionStore)
const fiber = await ctx.plugin(AgentlogSessionPersistence, { servers: env('NATS_URL'), name: 'dsh-blob-failure-check', user: env('TS_USER'), pass: env('TS_PASS'), leaseTtlMs: 0 })
const backend = ctx.sessionPersistence
if (process.env.TS_WRITE) {
  const wid = process.env.TS_WRITE
  const big = 'y'.repeat(3 << 20)
  await backend.appendBatch({ version: 0, id: wid, createdAt: 1785000000000 }, [
    { type: 'turn/start', seq: 0, time: 1785000000001, data: { turn: 1, trigger: { kind: 'message' } } },
    { type: 'user/message', seq: 1, time: 1785000000002, data: { id: 'm1', role: 'user', content: [{ type: 'text', text: big }], source: { kind: 'user' } }, surfaceOp: 'append' },
  ], false)
  const got = await backend.loadStored(SessionId(wid))
  await fiber.dispose()
  if (got?.events[1]?.data?.content?.[0]?.text !== big) throw new Error(`blob-failure-check: ${wid} did not load back`)
  console.log('ok')
  process.exit(0)
}
const text = 'x'.repeat(2 << 20)
const back = await backend.loadStored(SessionId(env('TS_READ')))
if (back?.events[1]?.data?.content?.[0]?.text !== text) throw new Error(`blob-failure-check: loading ${env('TS_READ')} did not give its offloaded event back`)
let err
try {
  await backend.appendBatch({ version: 0, id, createdAt: 1785000000000 }, [
    { type: 'turn/start', seq: 0, time: 1785000000001, data: { turn: 1, trigger: { kind: 'message' } } },
    { type: 'user/message', seq: 1, time: 1785000000002, data: { id: 'm1', role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } }, surfaceOp: 'append' },
  ], false)
} catch (e) {
  err = e
}
await fiber.dispose()
const want = `session ${JSON.stringify(id)} seq 1: store the event's`
if (!err || !err.message.includes(want) || !err.message.includes('maximum bytes exceeded')) {
  throw new Error(`blob-failure-check: the write into a full bucket gave ${err ? err.message : 'no error'}; want it to name the session and seq 1 (${want}) and the server's reason (maximum bytes exceeded)`)
}
console.log('ok')
