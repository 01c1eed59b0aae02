// A TS writer (this backend's write path) and a Go writer (the publisher, in the fault tests'
// writer process, integration_test/writer) on one session, 200 rounds. Each round both start from the same
// tail; the guard must let exactly one of the two concurrent writes in (a write that read the tail
// after the other's record is serialized, not concurrent: the other writer, now stale, must then be
// fenced). The log stays contiguous throughout.
import { execFile } from 'node:child_process'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { Context, type Fiber } from '@deepseek-ai/cordis'
import SessionStore, { SessionId } from '@deepseek-ai/dsh-session'
import type { SessionEvent, SessionHeader } from '@deepseek-ai/dsh-session'
import AgentlogSessionPersistence, { AgentlogConflictError, AgentlogLeaseHeldError, errorsSubject } from '../src/index.ts'
import { jetstreamManager } from '@nats-io/jetstream'
import { agentlogConfig, natsUrl, uniqueId, writerBin } from './stack.ts'

const ROUNDS = Number(process.env.RACE_ROUNDS ?? 200)

let fiber: Fiber
let backend: AgentlogSessionPersistence
beforeAll(async () => {
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  fiber = await ctx.plugin(AgentlogSessionPersistence, agentlogConfig({ writerId: 'ts-racer', leaseTtlMs: 0 })) // the guard alone: no lease refuses the Go writer early
  backend = ctx.sessionPersistence as AgentlogSessionPersistence
})
afterAll(async () => { await fiber?.dispose() })

/** One Go writer process: opens (resumes) the session, which writes its end-seed record. */
function goWriter(id: string, ...extra: string[]): Promise<{ ok: boolean; out: string }> {
  return new Promise(resolve => {
    execFile(writerBin(), ['--nats', natsUrl(), '--session', id, '--events', '1', '--writer-id', 'go-racer', ...extra],
      (err, stdout, stderr) => resolve({ ok: err === null, out: stdout + stderr }))
  })
}

it(`a TS writer and a Go writer on one session, ${ROUNDS} rounds: exactly one wins each round`, async () => {
  const id = uniqueId('race')
  const meta: SessionHeader = { version: 0, id: SessionId(id), createdAt: 1785000000000 } as SessionHeader
  await backend.create(meta)
  await backend.append(SessionId(id), [
    { type: 'turn/start', seq: 0, time: 1, data: { turn: 1 } },
    { type: 'turn/end', seq: 1, time: 2, data: { turn: 1, reason: { kind: 'completed' } } },
  ] as SessionEvent[])
  const outcome = { tsWon: 0, goWon: 0, serialized: 0 }
  let expected = 2
  for (let r = 0; r < ROUNDS; r++) {
    let before = await backend.loadStored(SessionId(id)) // the TS writer's tail: the current one
    expect(before!.events).toHaveLength(expected)
    if (before!.events.at(-1)!.type === 'session/end-seed') {
      // A Go resume writes nothing onto a log that ends with its marker: give it something to resume.
      await backend.appendBatch(meta, [{ type: 'race/fill', seq: expected, time: 10 + r, data: {}, ignorable: true } as SessionEvent], true)
      before = await backend.loadStored(SessionId(id))
      expected++
    }
    const ev = { type: 'race/ts', seq: expected, time: 10 + r, data: { round: r }, ignorable: true } as SessionEvent
    const go = goWriter(id)
    await new Promise(ok => setTimeout(ok, (r * 37) % 240)) // spread the TS write over the Go writer's start-up
    const ts = await backend.appendBatch(meta, [ev], true).then(() => null, (err: unknown) => err)
    const g = await go
    if (ts !== null && !(ts instanceof AgentlogConflictError)) throw ts
    if (!g.ok) expect(g.out, `round ${r}`).toMatch(/conflict|changed under/i)
    const after = await backend.loadStored(SessionId(id))
    const types = after!.events.slice(expected).map(e => e.type)
    if (ts === null && !g.ok) {
      outcome.tsWon++
      expect(types).toEqual(['race/ts'])
    } else if (ts !== null && g.ok) {
      outcome.goWon++
      expect(types).toEqual(['session/end-seed'])
    } else if (ts === null && g.ok) {
      // Serialized: the Go writer resumed after the TS record; the TS writer is now stale.
      outcome.serialized++
      expect(types).toEqual(['race/ts', 'session/end-seed'])
      const stale = await backend.appendBatch(meta, [{ ...ev, seq: expected + 1 }], true).then(() => null, (err: unknown) => err)
      expect(stale, `round ${r}: a stale TS writer was not fenced`).toBeInstanceOf(AgentlogConflictError)
    } else {
      throw new Error(`round ${r}: both writers lost: ${String(ts)} / ${g.out}`)
    }
    // Contiguous: loadStored decodes every record and checks that each continues the previous one.
    after!.events.forEach((e, i) => expect(e.seq).toBe(i))
    expected = after!.events.length
  }
  // The fenced TS writes were reported on agentlog.errors.<token> (never as session events).
  if (outcome.goWon + outcome.serialized > 0) {
    const nc = await (backend as AgentlogSessionPersistence).connection()
    const jsm = await jetstreamManager(nc)
    const last = await jsm.streams.getMessage('AGENTLOG_ERRORS', { last_by_subj: errorsSubject(id) })
    expect(last?.json()).toMatchObject({ type: 'agent/error', session: id, writerId: 'ts-racer' })
    expect((last?.json() as { error: string }).error).toMatch(/changed under this writer/)
  }
  console.log(`race: ${ROUNDS} rounds, TS won ${outcome.tsWon}, Go won ${outcome.goWon}, serialized ${outcome.serialized}`)
  expect(outcome.tsWon + outcome.goWon + outcome.serialized).toBe(ROUNDS)
}, 600_000)

it('writer leases: a live TS writer makes a Go Open refuse the session, and a live Go writer makes TS refuse it', async () => {
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  const leased = await ctx.plugin(AgentlogSessionPersistence, agentlogConfig({ writerId: 'ts-leased', leaseTtlMs: 2000 }))
  const ts = ctx.sessionPersistence as AgentlogSessionPersistence
  const id = uniqueId('lease')
  const meta: SessionHeader = { version: 0, id: SessionId(id), createdAt: 1785000000000 } as SessionHeader
  await ts.create(meta)
  await ts.append(SessionId(id), [
    { type: 'turn/start', seq: 0, time: 1, data: { turn: 1 } },
    { type: 'turn/end', seq: 1, time: 2, data: { turn: 1, reason: { kind: 'completed' } } },
  ] as SessionEvent[])
  // The TS writer's lease is live (and renewed past its 2 s TTL): the Go publisher refuses to open.
  await new Promise(ok => setTimeout(ok, 2500))
  const refused = await goWriter(id)
  expect(refused.ok).toBe(false)
  expect(refused.out).toMatch(/live writer|being written/)
  expect(refused.out).toContain('ts-leased')
  // Closing releases it: the Go writer now resumes the session (its end-seed record).
  await leased.dispose()
  const resumed = await goWriter(id)
  expect(resumed.ok, resumed.out).toBe(true)

  // A Go writer that is still writing holds its lease: the TS writer is refused before any write.
  const id2 = uniqueId('lease-go')
  const go = goWriter(id2, '--events', '200', '--batch', '1', '--pause', '20ms', '--flush-every', '1')
  let stored
  for (let i = 0; i < 100 && !(stored = await backend.loadStored(SessionId(id2))); i++) await new Promise(ok => setTimeout(ok, 50))
  expect(stored).toBeDefined()
  const ctx2 = new Context()
  await ctx2.plugin(SessionStore)
  const second = await ctx2.plugin(AgentlogSessionPersistence, agentlogConfig({ writerId: 'ts-second' }))
  const ts2 = ctx2.sessionPersistence as AgentlogSessionPersistence
  const st = await ts2.loadStored(SessionId(id2))
  const err = await ts2.appendBatch(st!.meta, [{ type: 'x/y', seq: st!.events.length, time: 1, data: {}, ignorable: true } as SessionEvent], true)
    .then(() => null, (e: unknown) => e)
  expect(err).toBeInstanceOf(AgentlogLeaseHeldError)
  expect(String(err)).toContain('go-racer')
  await second.dispose()
  const done = await go
  expect(done.ok, done.out).toBe(true)
}, 120_000)

it('a create refused because the session exists gives back the lease it took in the same round trip', async () => {
  const id = uniqueId('lease-refused')
  const first = await goWriter(id) // writes the session, then releases its lease
  expect(first.ok, first.out).toBe(true)
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  const fiber2 = await ctx.plugin(AgentlogSessionPersistence, agentlogConfig({ writerId: 'ts-refused', leaseTtlMs: 60_000 }))
  const ts = ctx.sessionPersistence as AgentlogSessionPersistence
  const meta: SessionHeader = { version: 0, id: SessionId(id), createdAt: 1785000000000 } as SessionHeader
  const err = await ts.appendBatch(meta, [{ type: 'turn/start', seq: 0, time: 1, data: { turn: 1 } } as SessionEvent], false)
    .then(() => null, (e: unknown) => e)
  expect(String(err)).toMatch(/already exists/)
  // Were the lease kept, the Go writer would be refused for its 60 s TTL.
  const again = await goWriter(id)
  expect(again.ok, again.out).toBe(true)
  await fiber2.dispose()
}, 60_000)
