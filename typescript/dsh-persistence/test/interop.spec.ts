// Identity both ways between this backend and the Go stack, on the default agentlog names of the
// test stack: TS writes → `agentlog messages` / `agentlog events` read; `agentlog import` writes →
// the backend loads identical events; a Go fork of a TS-written session loads in dsh.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Context, type Fiber } from '@deepseek-ai/cordis'
import SessionStore, { SessionId } from '@deepseek-ai/dsh-session'
import type { SessionEvent, SessionHeader } from '@deepseek-ai/dsh-session'
import AgentlogSessionPersistence, { sessionSubject, token, type WireEvent } from '../src/index.ts'
import { encodeEventLine, recordHeaders } from '../src/wire.ts'
import { headers as natsHeaders } from '@nats-io/transport-node'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { Objm } from '@nats-io/obj'
import { agentlog, agentlogConfig, agentlogResult, uniqueId } from './stack.ts'
import { recordedSessions, readJsonl } from './jsonl.ts'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createHash } from 'node:crypto'

let ctx: Context
let fiber: Fiber
let backend: AgentlogSessionPersistence

beforeAll(async () => {
  ctx = new Context()
  await ctx.plugin(SessionStore)
  fiber = await ctx.plugin(AgentlogSessionPersistence, agentlogConfig())
  backend = ctx.sessionPersistence as AgentlogSessionPersistence
})
afterAll(async () => { await fiber?.dispose() })

const recorded = recordedSessions()

function metaFor(id: string, h: Record<string, unknown> | undefined): SessionHeader {
  return {
    version: 0,
    id: SessionId(id),
    createdAt: typeof h?.createdAt === 'number' ? h.createdAt : 1785000000000,
    ...typeof h?.cwd === 'string' ? { cwd: h.cwd } : {},
    ...typeof h?.agentPreset === 'string' ? { agentPreset: h.agentPreset } : {},
  } as SessionHeader
}

/** `agentlog events ID --no-header`, parsed. */
async function goEvents(id: string): Promise<{ text: string; events: WireEvent[] }> {
  const text = await agentlog('events', '--no-header', '--', id)
  return { text, events: readJsonl(text).events }
}

describe('TS writes, Go reads', () => {
  it(`recorded sessions (${recorded.length}): agentlog messages equals the oracle's messages, events round-trip`, async () => {
    expect(recorded.length).toBeGreaterThan(0)
    let byteIdentical = 0
    for (const r of recorded) {
      const id = uniqueId('ts-writes')
      await backend.create(metaFor(id, r.header as Record<string, unknown>))
      await backend.append(SessionId(id), r.events as SessionEvent[])
      const messages = JSON.parse(await agentlog('messages', id))
      expect(messages, r.name).toEqual(r.expected.messages)
      const go = await goEvents(id)
      expect(go.events, r.name).toEqual(r.events)
      // The Go stack re-encodes what we wrote byte for byte (its encoder keeps data bytes).
      expect(go.text, r.name).toBe(r.events.map(e => encodeEventLine(id, e) + '\n').join(''))
      byteIdentical++
    }
    expect(byteIdentical).toBe(recorded.length)
  })

  it('a record bigger than the max message size is split into an atomic batch and read back whole', async () => {
    const id = uniqueId('ts-split')
    const pad = 'x'.repeat(500)
    const events: SessionEvent[] = [{ type: 'turn/start', seq: 0, time: 1, data: { turn: 1 } } as SessionEvent]
    for (let i = 1; i < 2600; i++) {
      events.push({ type: 'assistant/chunk', seq: i, time: 1 + i, data: { turn: 1, step: 1, chunk: { type: 'text-delta', index: 0, text: pad } } } as SessionEvent)
    }
    await backend.create(metaFor(id, undefined))
    await backend.append(SessionId(id), events)
    const go = await goEvents(id)
    expect(go.events).toHaveLength(events.length)
    expect(go.events).toEqual(events)
    const stored = await backend.loadStored(SessionId(id))
    expect(stored?.events).toEqual(events)
  })
})

describe('large events (offloaded to agentlog_blobs)', () => {
  // A turn whose tool result is `size` bytes of text, with small events around it.
  const bigTurn = (size: number): SessionEvent[] => ([
    { type: 'turn/start', seq: 0, time: 1, data: { turn: 1 } },
    { type: 'user/message', seq: 1, time: 2, data: { id: 'u1', role: 'user', content: [{ type: 'text', text: 'read it' }], source: { kind: 'user' } }, surfaceOp: 'append' },
    { type: 'step/start', seq: 2, time: 3, data: { turn: 1, step: 1 } },
    { type: 'assistant/message', seq: 3, time: 4, data: { turn: 1, step: 1, message: { id: 'a1', role: 'assistant', content: [{ type: 'text', text: 'ok' }, { type: 'tool-call', id: 'c1', name: 'read', arguments: '{}' }], source: { kind: 'model', provider: 'p', model: 'm' } } }, surfaceOp: 'append', sourceEventSeqs: [] },
    { type: 'tool/call', seq: 4, time: 5, data: { turn: 1, step: 1, callId: 'c1', name: 'read', arguments: '{}' } },
    { type: 'tool/result', seq: 5, time: 6, data: { turn: 1, step: 1, message: { id: 'r1', role: 'user', content: [{ type: 'tool-result', toolCallId: 'c1', content: [{ type: 'text', text: 'é'.repeat(size / 2) }] }], source: { kind: 'tool', callId: 'c1' } } }, surfaceOp: 'append', sourceEventSeqs: [4] },
    { type: 'step/end', seq: 6, time: 7, data: { turn: 1, step: 1 } },
    { type: 'turn/end', seq: 7, time: 8, data: { turn: 1, reason: { kind: 'completed' } } },
  ] as unknown as SessionEvent[])

  it('TS writes a 3 MiB tool result with small siblings; Go reads the same bytes, and messages', async () => {
    const id = uniqueId('ts-large')
    const events = bigTurn(3 << 20)
    await backend.create(metaFor(id, undefined))
    await backend.append(SessionId(id), events)
    const go = await goEvents(id)
    expect(go.text).toBe(events.map(e => encodeEventLine(id, e as WireEvent) + '\n').join(''))
    const messages = JSON.parse(await agentlog('messages', id))
    expect(messages).toHaveLength(3)
    expect(messages[2]).toEqual((events[5]!.data as any).message)
    expect((await backend.loadStored(SessionId(id)))?.events).toEqual(events)
  })

  it('Go writes (agentlog import) a 3 MiB tool result; loadStored gives it back exactly', async () => {
    const id = uniqueId('go-large')
    const events = bigTurn(3 << 20)
    const file = join(mkdtempSync(join(tmpdir(), 'dsh-large-')), 'session.jsonl')
    writeFileSync(file, events.map(e => encodeEventLine(id, e as WireEvent) + '\n').join(''))
    await agentlog('import', file, '--session', id)
    expect((await backend.loadStored(SessionId(id)))?.events).toEqual(events)
  })

  it('a blob that is gone or differs is refused on load, naming the session, seq and rule', async () => {
    const id = uniqueId('ts-lost-blob')
    await backend.create(metaFor(id, undefined))
    await backend.append(SessionId(id), bigTurn(2 << 20))
    const nc = await backend.connection()
    const jsm = await jetstreamManager(nc)
    const si = await jsm.streams.info('AGENTLOG_BLOBS', { subjects_filter: `agentlog.blob.${token(id)}.>` })
    const subjects = Object.keys(si.state.subjects ?? {}).sort()
    expect(subjects.length).toBeGreaterThan(0)
    // A chunk cannot be overwritten (write-once stream): the publish is refused, the blob reads back.
    await expect(jetstream(nc).publish(subjects[0]!, new TextEncoder().encode('x'))).rejects.toThrow()
    expect((await backend.loadStored(SessionId(id)))?.events).toHaveLength(8)
    // Only after an operator's purge can other bytes take the subjects: refused on load.
    await jsm.streams.purge('AGENTLOG_BLOBS', { filter: `agentlog.blob.${token(id)}.>` })
    for (const subj of subjects) await jetstream(nc).publish(subj, new TextEncoder().encode('{"type":"x","seq":5,"time":1,"data":{}}'))
    await expect(backend.loadStored(SessionId(id))).rejects.toThrow(/seq 5: .*another SHA-256.*record-blob/)
    await jsm.streams.purge('AGENTLOG_BLOBS', { filter: `agentlog.blob.${token(id)}.>` })
    await expect(backend.loadStored(SessionId(id))).rejects.toThrow(/seq 5: .*is missing.*record-blob/)
  })

  it('a legacy record (format 2) whose event is an Object Store object, written the old way, reads back by direct gets', async () => {
    const id = uniqueId('ts-legacy-blob')
    const tok = token(id)
    const first = bigTurn(2)[0]!
    await backend.create(metaFor(id, undefined))
    await backend.append(SessionId(id), [first])
    const nc = await backend.connection()
    const objm = new Objm(jetstream(nc))
    const os = await objm.create('agentlog_blobs', { storage: 'file' as never }).catch(() => objm.open('agentlog_blobs'))
    const ev = { ...(bigTurn(300_000)[5]! as unknown as WireEvent), seq: 1 }
    const line = new TextEncoder().encode(encodeEventLine(id, ev))
    const sha256 = createHash('sha256').update(line).digest('hex')
    await os.putBlob({ name: `${tok}/1/NUIDLEGACY` }, line)
    const h = natsHeaders()
    for (const [k, v] of recordHeaders(tok, 1, 1)) h.set(k, v)
    h.set('Agentlog-Format', '2')
    h.set('Agentlog-Blob', `1 ${line.length} ${sha256} NUIDLEGACY`)
    await jetstream(nc).publish(sessionSubject(id, 16), new Uint8Array(0), { headers: h })
    const stored = await backend.loadStored(SessionId(id))
    expect(stored?.events).toHaveLength(2)
    expect(encodeEventLine(id, stored!.events[1] as WireEvent)).toBe(new TextDecoder().decode(line))
    const go = await goEvents(id)
    expect(go.text.split('\n')[1]).toBe(new TextDecoder().decode(line))
    await os.delete(`${tok}/1/NUIDLEGACY`)
    await expect(backend.loadStored(SessionId(id))).rejects.toThrow(/seq 1: .*missing.*record-blob/)
  })

  it('an event over maxEventBytes is refused, naming the session, seq and rule, and nothing is stored', async () => {
    const capped = new Context()
    await capped.plugin(SessionStore)
    const f = await capped.plugin(AgentlogSessionPersistence, agentlogConfig({ maxEventBytes: 1 << 20 }))
    try {
      const b = capped.sessionPersistence as AgentlogSessionPersistence
      const id = uniqueId('ts-capped')
      const meta = metaFor(id, undefined)
      await expect(b.appendBatch(meta, bigTurn(2 << 20), false)).rejects.toThrow(/seq 5: the event is \d+ bytes encoded, the max event size is 1048576 bytes .*event-too-large/)
      expect(await b.loadStored(SessionId(id))).toBeUndefined()
    } finally {
      await f.dispose()
    }
  })
})

describe('Go writes, TS loads', () => {
  it(`recorded sessions (${recorded.length}): agentlog import, then loadStored gives identical events`, async () => {
    for (const r of recorded) {
      const id = uniqueId('go-writes')
      await agentlog('import', r.file, '--session', id)
      const stored = await backend.loadStored(SessionId(id))
      expect(stored, r.name).toBeDefined()
      expect(stored!.meta.id).toBe(id)
      expect(stored!.events, r.name).toEqual(r.events)
      // And both writers' records give the same bytes to the Go reader.
      const tsId = uniqueId('ts-twin')
      await backend.create(metaFor(tsId, r.header as Record<string, unknown>))
      await backend.append(SessionId(tsId), r.events as SessionEvent[])
      const [a, b] = await Promise.all([goEvents(id), goEvents(tsId)])
      if (a.text !== b.text) {
        // Only data bytes that are not JSON.stringify's canonical form may differ (the Go importer
        // keeps a file's bytes as they are); the values must still be equal.
        expect(b.events, r.name).toEqual(a.events)
      }
    }
  })

  it('a Go-written session resumes in dsh and continues its seq', async () => {
    const r = recorded.find(x => x.expected.events > 5)!
    const id = uniqueId('go-resume')
    // The recorded headers carry template placeholders ("{{cwd}}"), which dsh refuses as a cwd.
    const file = join(mkdtempSync(join(tmpdir(), 'dsh-resume-')), 'session.jsonl')
    writeFileSync(file, readFileSync(r.file, 'utf8').replace(/"cwd":"[^"]*"/, '"cwd":"/w"'))
    await agentlog('import', file, '--session', id)
    const loaded = await backend.load(SessionId(id))
    expect(loaded.meta.cwd).toBe('/w')
    expect(loaded.events.length).toBeGreaterThanOrEqual(r.events.length)
    expect(loaded.events.slice(0, r.events.length)).toEqual(r.events)
    // Resume it as a live session: dsh appends its end-seed through this backend, after the Go records.
    const live = ctx.sessions.create(SessionId(id), { seed: loaded.events, meta: { cwd: "/w" } })
    await ctx.sessions.flush(live)
    const go = await goEvents(id)
    expect(go.events.slice(0, loaded.events.length)).toEqual(loaded.events)
    expect(go.events.at(-1)).toMatchObject({ type: 'session/end-seed', seq: loaded.events.length })
  })
})

describe('retries after a lost ack', () => {
  // Simulate writes whose ack was lost: the record is stored under this writer's Nats-Msg-Id, but
  // the backend did not learn it. The retry must find it and never store the events twice.
  async function storeBehindTheBacksOf(id: string, guard: number, events: WireEvent[]) {
    const nc = await backend.connection()
    const tok = token(id)
    const h = natsHeaders()
    for (const [k, v] of recordHeaders(tok, events[0]!.seq, events.length)) h.set(k, v)
    h.set('Nats-Expected-Last-Subject-Sequence', String(guard))
    h.set('Nats-Msg-Id', (backend as any).writer.msgIdOf(id, tok, events[0]!.seq))
    const ack = await jetstream(nc).publish(sessionSubject(id, 16), events.map(e => encodeEventLine(id, e)).join('\n'), { headers: h })
    return ack.seq
  }
  const log = (from: number, n: number): WireEvent[] =>
    Array.from({ length: n }, (_, i) => ({ type: 'retry/test', seq: from + i, time: 1 + from + i, data: { i: from + i }, ignorable: true as const }))

  it('a first record and a later one are found at the tail, and only the rest is written', async () => {
    const id = uniqueId('lost-ack')
    const meta = metaFor(id, undefined)
    const tails = (backend as any).writer.tails as Map<string, unknown>
    // First record: written, then its ack "lost" (the backend forgets the tail); the coordinator
    // retries the first batch, now with two more events, still as an unmaterialized session.
    await backend.appendBatch(meta, log(0, 3) as SessionEvent[], false)
    tails.delete(id)
    await backend.appendBatch(meta, log(0, 5) as SessionEvent[], false)
    let stored = await backend.loadStored(SessionId(id))
    expect(stored!.events.map(e => e.seq)).toEqual([0, 1, 2, 3, 4])
    // A later record stored behind the backend's back at its current guard, then retried.
    const nc = await backend.connection()
    const last = await (await jetstreamManager(nc)).streams.getMessage('AGENTLOG', { last_by_subj: sessionSubject(id, 16) })
    await storeBehindTheBacksOf(id, last!.seq, log(5, 2))
    await backend.appendBatch(meta, log(5, 3) as SessionEvent[], true)
    stored = await backend.loadStored(SessionId(id))
    expect(stored!.events.map(e => e.seq)).toEqual([0, 1, 2, 3, 4, 5, 6, 7])
    expect((await goEvents(id)).events).toEqual(log(0, 8))
    // The metadata entry carries an incarnation, and the records' Msg-Ids name it.
    const meta2 = await (await (backend as any).ready).readMeta(token(id))
    expect(meta2.incarnation).toMatch(/^[A-Za-z0-9]{22}$/)
    const tail = await (await jetstreamManager(nc)).streams.getMessage('AGENTLOG', { last_by_subj: sessionSubject(id, 16) })
    expect(tail!.header.get('Nats-Msg-Id')).toBe(`${backend.writerId}.${token(id)}.${meta2.incarnation}.7`)
  })
})

describe('session ids that are not subject-safe', () => {
  // Both sides must map an id to the same token and partition (PROTOCOL.md §3).
  const ids = ['a.b c', 'x_y*>', 'é 中文 🙂', '-', 'A'.repeat(200), 'tab\tnew\nline', '_5F']
  it('Go writes, TS loads, and TS writes, Go reads, under ids with dots, wildcards, spaces and non-ASCII', async () => {
    const r = recorded[0]!
    for (const raw of ids) {
      const goId = `${raw}-go-${uniqueId('x')}`
      await agentlog('import', r.file, '--session', goId)
      const stored = await backend.loadStored(SessionId(goId))
      expect(stored?.events, goId).toEqual(r.events)
      const tsId = `${raw}-ts-${uniqueId('x')}`
      await backend.create(metaFor(tsId, undefined))
      await backend.append(SessionId(tsId), r.events as SessionEvent[])
      expect((await goEvents(tsId)).events, tsId).toEqual(r.events)
    }
  })

  it('ids that are not 1..256 bytes of UTF-8 are refused, naming the rule', async () => {
    await expect(backend.loadStored(SessionId('x'.repeat(257)))).rejects.toThrow(/id-too-long/)
    await expect(backend.loadStored(SessionId('bad\ud800'))).rejects.toThrow(/id-utf8/)
  })
})

describe('forks', () => {
  it('a fork made by the Go forker of a TS-written session loads in dsh', async () => {
    const parent = uniqueId('ts-parent')
    const session = ctx.sessions.create(SessionId(parent), { meta: { cwd: '/w' } })
    const r = recorded.find(x => x.expected.events > 10 && x.expected.ok)!
    // Drive a real live session with dsh's own SessionStore.
    const { appendLog } = await import('../../../../shared/dsh-contract/tests/contract.ts')
    appendLog(session, [
      { type: 'turn/start', seq: 0, time: 1, data: { turn: 1 } },
      { type: 'user/message', seq: 1, time: 2, data: { id: 'm1', role: 'user', content: [{ type: 'text', text: 'hi' }], source: { kind: 'user' } }, surfaceOp: 'append' },
      { type: 'step/start', seq: 2, time: 3, data: { turn: 1, step: 1 } },
      { type: 'assistant/message', seq: 3, time: 4, data: { turn: 1, step: 1, message: { id: 'm2', role: 'assistant', content: [{ type: 'text', text: 'hello' }], source: { kind: 'model', provider: 'mock', model: 'mock' } } }, surfaceOp: 'append' },
      { type: 'step/end', seq: 4, time: 5, data: { turn: 1, step: 1 } },
      { type: 'turn/end', seq: 5, time: 6, data: { turn: 1, reason: { kind: 'completed' } } },
    ] as unknown as SessionEvent[])
    await ctx.sessions.flush(session)
    void r
    const child = uniqueId('go-fork')
    const out = JSON.parse(await agentlog('fork', parent, '--at', '5', '--child', child, '--json'))
    expect(out).toMatchObject({ child, seedLength: 6, parentSession: parent })
    const stored = await backend.loadStored(SessionId(child))
    expect(stored?.meta).toMatchObject({ id: child, parentSession: parent, seedLength: 6 })
    const parentStored = await backend.loadStored(SessionId(parent))
    expect(stored!.events.slice(0, 6)).toEqual(parentStored!.events.slice(0, 6))
    expect(stored!.events[6]).toMatchObject({ type: 'session/end-seed', seq: 6, data: {} })
    const loaded = await backend.load(SessionId(child))
    expect(loaded.events).toHaveLength(7)
    expect(loaded.meta.parentSession).toBe(parent)
    // And its messages, from the projector.
    expect(JSON.parse(await agentlog('messages', child))).toHaveLength(2)
    // A fork boundary inside an open turn is refused with the reference's text.
    const refused = await agentlogResult('fork', parent, '--at', '2')
    expect(refused.code).toBe(1)
    expect(refused.stderr).toContain(`OPEN_TURN: fork boundary 2 in session "${parent}" ends inside open turn 1`)
  })
})

describe('many sessions written at once', () => {
  // Record bodies are cut from shared slabs that are reused once acked: a slab handed out twice
  // while a body of it was still being sent would corrupt another session's record.
  it('300 live sessions, interleaved through the coordinator\'s windows, read back whole', async () => {
    const n = 300
    const events = 60
    const ids = Array.from({ length: n }, (_, i) => uniqueId(`slab-${i}`))
    const sessions = ids.map(id => ctx.sessions.create(SessionId(id), { meta: { cwd: '/slab' } }))
    for (let k = 0; k < events; k++) {
      for (let i = 0; i < n; i++) {
        const text = `${ids[i]} #${k} ` + Buffer.alloc(100 + ((i * 31 + k * 7) % 3000), 0x61 + (i + k) % 26).toString('latin1') + ' é€😀'
        ;(sessions[i] as any).append('assistant/chunk', { turn: 1, step: 1, chunk: { type: 'text-delta', index: 0, text } })
      }
      await new Promise(ok => setTimeout(ok, k % 10 === 0 ? 30 : 0))
    }
    await Promise.all(sessions.map(s => ctx.sessions.flush(s)))
    for (let i = 0; i < n; i++) {
      const stored = await backend.loadStored(SessionId(ids[i]!))
      expect(stored?.events.length).toBe(events)
      stored!.events.forEach((e, k) => expect((e.data as any).chunk.text.startsWith(`${ids[i]} #${k} `), `${ids[i]} seq ${k}`).toBe(true))
    }
  }, 120_000)
})
