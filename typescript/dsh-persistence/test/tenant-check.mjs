// Writes one session through this backend as the identity the environment names, reads it back, and
// prints "ok": deploy/multi-tenant's TestMultiTenant runs it as tenant A's agent (nkey, TLS with a
// client certificate) to check the agent role's permissions are enough for the TypeScript backend.
//
//   NATS_URL=tls://... TS_NKEY=agent.nk TS_CA=ca.pem TS_CERT=agent.pem TS_KEY=agent-key.pem \
//   TS_SESSION=id TS_TEXT=marker node test/tenant-check.mjs
// (or TS_USER and TS_PASS in place of TS_NKEY; or TS_FROM_ENV=1 and AGENTLOG_NATS_NKEY,
// AGENTLOG_NATS_TLS_CA, ... in place of all of them; TS_DOMAIN sets the config's JetStream domain).
// Needs `npm ci` (the built lib/).
import { Context } from '@deepseek-ai/cordis'
import SessionStore, { SessionId } from '@deepseek-ai/dsh-session'
import AgentlogSessionPersistence from '../lib/index.js'

const env = k => {
  const v = process.env[k]
  if (!v) throw new Error(`tenant-check: ${k} is not set`)
  return v
}
// With TS_FROM_ENV=1 the credentials and TLS files come from AGENTLOG_NATS_* alone, not the config.
const config = { servers: env('NATS_URL'), name: 'dsh-tenant-check' }
// TS_DOMAIN: the config's JetStream domain (integration_test/leafnode_test.go, through a leaf node).
if (process.env.TS_DOMAIN) config.domain = process.env.TS_DOMAIN
if (process.env.TS_FROM_ENV !== '1') {
  config.tls = { ca: env('TS_CA'), cert: env('TS_CERT'), key: env('TS_KEY') }
  if (process.env.TS_NKEY) config.nkeyFile = process.env.TS_NKEY
  else Object.assign(config, { user: env('TS_USER'), pass: env('TS_PASS') })
}

const ctx = new Context()
await ctx.plugin(SessionStore)
const fiber = await ctx.plugin(AgentlogSessionPersistence, config)
const backend = ctx.sessionPersistence
const id = SessionId(env('TS_SESSION'))
await backend.create({ version: 0, id, createdAt: 1785000000000 })
await backend.append(id, [
  { type: 'turn/start', seq: 0, time: 1785000000001, data: { turn: 1, trigger: { kind: 'message' } } },
  { type: 'user/message', seq: 1, time: 1785000000002, data: { id: 'm1', role: 'user', content: [{ type: 'text', text: env('TS_TEXT') }], source: { kind: 'user' } }, surfaceOp: 'append' },
  { type: 'turn/end', seq: 2, time: 1785000000003, data: { turn: 1, reason: { kind: 'completed' } } },
])
const back = await backend.loadStored(id)
if (back?.events.length !== 3) throw new Error(`tenant-check: read back ${back?.events.length} events, want 3`)
await fiber.dispose()
console.log('ok')
