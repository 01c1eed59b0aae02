// Archived sessions (PROTOCOL.md §13) between the Go stack and this backend, on the default names
// of the test stack: Go archives (`agentlog archive`), the backend loads the archive (events and
// surface equal to the hot log's), resumes it (a restore, then the append), and the Go stack reads
// it whole again; an archive that does not match its head is refused naming the session.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Context, type Fiber } from '@deepseek-ai/cordis'
import SessionStore, { SessionId } from '@deepseek-ai/dsh-session'
import type { SessionEvent } from '@deepseek-ai/dsh-session'
import AgentlogSessionPersistence, { AgentlogConflictError, sessionSubject, token, type Config, type WireEvent } from '../src/index.ts'
import { AgentlogArchiveCorruptError, archivePartSubject, archiveSubject, ARCHIVE_STREAM } from '../src/archive.ts'
import { encodeEventLine, recordHeaders } from '../src/wire.ts'
import { headers as natsHeaders } from '@nats-io/transport-node'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { agentlog, agentlogConfig, uniqueId } from './stack.ts'
import { recordedSessions, readJsonl } from './jsonl.ts'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createHash, randomBytes } from 'node:crypto'
import { zstdCompressSync } from 'node:zlib'

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

/** `agentlog events ID --no-header`, parsed. */
async function goEvents(id: string): Promise<{ text: string; events: WireEvent[] }> {
  const text = await agentlog('events', '--no-header', '--', id)
  return { text, events: readJsonl(text).events }
}

/** `agentlog archive ID --json`: the archive id. */
async function goArchive(id: string): Promise<string> {
  const res = JSON.parse(await agentlog('archive', id, '--json'))
  expect(res.archived, JSON.stringify(res)).toBe(true)
  expect(JSON.parse(await agentlog('status', id, '--json')).state).toBe('archived')
  return res.archiveId as string
}

/** A session imported by the Go stack from a recorded session (its cwd a real path, as dsh needs), and archived. */
async function importedArchived(prefix: string, minEvents = 1): Promise<{ id: string; events: WireEvent[]; messages: unknown; archiveId: string; text: string }> {
  const r = recorded.find(x => x.expected.events >= minEvents) ?? recorded[0]!
  const id = uniqueId(prefix)
  const file = join(mkdtempSync(join(tmpdir(), 'dsh-archive-')), 'session.jsonl')
  writeFileSync(file, readFileSync(r.file, 'utf8').replace(/"cwd":"[^"]*"/, '"cwd":"/w"'))
  await agentlog('import', file, '--session', id)
  const hot = await goEvents(id)
  const messages = JSON.parse(await agentlog('messages', id))
  const archiveId = await goArchive(id)
  return { id, events: hot.events, messages, archiveId, text: hot.text }
}

describe('Go archives, TS loads', () => {
  it(`recorded sessions (${recorded.length}): loadStored of the archive gives the hot log's events, byte for byte; inspect's surface is the hot log's`, async () => {
    expect(recorded.length).toBeGreaterThan(0)
    let inspected = 0
    const revisions = new Map<string, unknown>()
    for (const r of recorded) {
      const id = uniqueId('go-archived')
      // The recorded headers carry template placeholders ("{{cwd}}"), which dsh refuses as a cwd.
      const file = join(mkdtempSync(join(tmpdir(), 'dsh-archive-')), 'session.jsonl')
      writeFileSync(file, readFileSync(r.file, 'utf8').replace(/"cwd":"[^"]*"/, '"cwd":"/w"'))
      await agentlog('import', file, '--session', id)
      const hot = await backend.loadStored(SessionId(id))
      // inspect folds the session in dsh (its surface); some recorded sessions dsh refuses: the
      // archive must then be refused with the same words.
      const inspect = () => backend.inspect(SessionId(id)).then(x => ({ events: x.events, surface: (x as { surface?: unknown }).surface }), (e: Error) => ({ error: e.message }))
      const hotInspect = await inspect()
      const hotText = (await goEvents(id)).text
      await goArchive(id)
      const cold = await backend.loadStored(SessionId(id))
      expect(cold, r.name).toBeDefined()
      expect(cold!.meta).toEqual(hot!.meta)
      expect(cold!.events, r.name).toEqual(hot!.events)
      expect(cold!.events.map(e => encodeEventLine(id, e as WireEvent) + '\n').join(''), r.name).toBe(hotText)
      expect(await inspect(), r.name).toEqual(hotInspect)
      if (!('error' in hotInspect)) inspected++
      // A read never restores: the session stays archived.
      expect(JSON.parse(await agentlog('status', id, '--json')).state, r.name).toBe('archived')
      expect(await backend.readStoredRevision(SessionId(id))).toBe(cold!.revision)
      revisions.set(id, cold!.revision)
    }
    expect(inspected).toBeGreaterThan(0)
    // Listed as before, with the revision a load gives.
    const listed = new Map((await backend.listSnapshots()).map(x => [x.header.id as string, x.revision]))
    for (const [id, rev] of revisions) expect(listed.get(id), id).toBe(rev)
    const ids = new Set((await backend.list()).map(h => h.id as string))
    for (const id of revisions.keys()) expect(ids.has(id), id).toBe(true)
  })
})

describe('TS resumes an archived session', () => {
  it('the first write restores it (records with Nats-Msg-Id restore:<archive id>), then appends after; Go reads it whole', async () => {
    const a = await importedArchived('ts-resume-archived', 6)
    const loaded = await backend.load(SessionId(a.id))
    expect(loaded.events.slice(0, a.events.length)).toEqual(a.events)
    const live = ctx.sessions.create(SessionId(a.id), { seed: loaded.events, meta: { cwd: '/w' } })
    await ctx.sessions.flush(live)
    expect(JSON.parse(await agentlog('status', a.id, '--json')).state).toBe('active')
    const go = await goEvents(a.id)
    expect(go.events.slice(0, loaded.events.length)).toEqual(loaded.events)
    expect(go.text.startsWith(a.text)).toBe(true) // the restored records hold the archived bytes
    expect(go.events.at(-1)).toMatchObject({ type: 'session/end-seed', seq: loaded.events.length })
    // Go's fold of the restored log equals the hot log's before the archive.
    expect(JSON.parse(await agentlog('messages', a.id))).toEqual(a.messages)
    // The first hot record is the restore's.
    const nc = await backend.connection()
    const jsm = await jetstreamManager(nc)
    const first = await jsm.streams.getMessage('AGENTLOG', { seq: 1, next_by_subj: await subjectOf(a.id) } as { seq: number })
    expect(first?.header.get('Nats-Msg-Id')).toMatch(new RegExp(`^restore:${a.archiveId}(~[0-9]+)?$`))
    expect(first?.header.get('Agentlog-First-Seq')).toBe('0')
  })

  it('a restore that another writer did first is found, not written twice', async () => {
    const a = await importedArchived('ts-restore-raced', 3)
    // A backend that loaded the session while it was archived restores with guard 0 and finds
    // the records Go's restore wrote meanwhile.
    const other = await freshBackend()
    try {
      const loaded = await other.backend.loadStored(SessionId(a.id))
      expect(loaded!.events).toEqual(a.events)
      await agentlog('restore', a.id) // Go restores between this backend's load and its write
      const next: SessionEvent = { type: 'turn/start', seq: a.events.length, time: 1785000000999, data: { turn: 999 } } as SessionEvent
      await other.backend.appendBatch(loaded!.meta, [next], true)
      const go = await goEvents(a.id)
      expect(go.events).toEqual([...a.events, next])
    } finally {
      await other.dispose()
    }
  })
})

describe('archived under a writer', () => {
  it('a writer whose session was archived since its last write restores it and appends (no conflict)', async () => {
    const w = await freshBackend({ leaseTtlMs: 0 }) // no lease, so that `agentlog archive` may take it
    try {
      const id = uniqueId('ts-archived-under')
      const meta = { version: 0, id: SessionId(id), createdAt: 1785000000000, cwd: '/w', delegationDepth: 0 } as never
      const first: SessionEvent[] = [0, 1, 2].map(i => ({ type: 'turn/start', seq: i, time: 1785000000001 + i, data: { turn: i + 1 } }) as SessionEvent)
      await w.backend.appendBatch(meta, first, false)
      await goArchive(id)
      const more = { type: 'turn/start', seq: 3, time: 1785000000009, data: { turn: 4 } } as SessionEvent
      await w.backend.appendBatch(meta, [more], true)
      expect(JSON.parse(await agentlog('status', id, '--json')).state).toBe('active')
      expect((await goEvents(id)).events).toEqual([...first, more])
    } finally {
      await w.dispose()
    }
  })
})

describe('two writers resume one archived session at once', () => {
  it('one restore is written, the other finds it; one append wins, the other is fenced', async () => {
    const a = await importedArchived('ts-restore-twice', 3)
    // No leases, so that both get as far as the restore (with leases the second is refused first).
    const [x, y] = await Promise.all([freshBackend({ leaseTtlMs: 0 }), freshBackend({ leaseTtlMs: 0 })])
    try {
      const [lx, ly] = await Promise.all([x.backend.loadStored(SessionId(a.id)), y.backend.loadStored(SessionId(a.id))])
      expect(lx!.events).toEqual(a.events)
      expect(ly!.events).toEqual(a.events)
      const ev = (turn: number): SessionEvent => ({ type: 'turn/start', seq: a.events.length, time: 1785000000999, data: { turn } }) as SessionEvent
      const [rx, ry] = await Promise.allSettled([x.backend.appendBatch(lx!.meta, [ev(1)], true), y.backend.appendBatch(ly!.meta, [ev(2)], true)])
      const won = [rx, ry].filter(r => r.status === 'fulfilled')
      const lost = [rx, ry].filter(r => r.status === 'rejected') as PromiseRejectedResult[]
      expect(won).toHaveLength(1)
      expect(lost).toHaveLength(1)
      expect(lost[0]!.reason).toBeInstanceOf(AgentlogConflictError)
      const go = await goEvents(a.id)
      expect(go.events).toEqual([...a.events, rx.status === 'fulfilled' ? ev(1) : ev(2)])
      expect(go.text.startsWith(a.text)).toBe(true)
    } finally {
      await Promise.all([x.dispose(), y.dispose()])
    }
  })
})

async function subjectOf(id: string): Promise<string> {
  const nc = await backend.connection()
  const jsm = await jetstreamManager(nc)
  const si = await jsm.streams.info('AGENTLOG', { subjects_filter: `agentlog.session.*.${token(id)}` })
  return Object.keys(si.state.subjects ?? {})[0]!
}

async function freshBackend(extra: Partial<Config> = {}): Promise<{ backend: AgentlogSessionPersistence; dispose: () => Promise<void> }> {
  const c = new Context()
  await c.plugin(SessionStore)
  const f = await c.plugin(AgentlogSessionPersistence, agentlogConfig(extra))
  return { backend: c.sessionPersistence as AgentlogSessionPersistence, dispose: async () => { await f.dispose() } }
}

describe('a corrupt archive is refused, naming the session', () => {
  /** Replace the archive head of id with one whose headers edit() changed (same body). */
  async function rewriteHead(id: string, edit: (h: Map<string, string>) => void): Promise<Map<string, string>> {
    const nc = await backend.connection()
    const jsm = await jetstreamManager(nc)
    const js = jetstream(nc)
    const m = await jsm.streams.getMessage(ARCHIVE_STREAM, { last_by_subj: archiveSubject(token(id)) })
    const h = new Map<string, string>()
    for (const k of m!.header.keys()) if (!k.startsWith('Nats-')) h.set(k, m!.header.get(k))
    edit(h)
    const out = natsHeaders()
    for (const [k, v] of h) out.set(k, v)
    await js.publish(archiveSubject(token(id)), m!.data, { headers: out })
    return h
  }

  it('a head whose JSONL size is not the payload\'s', async () => {
    const a = await importedArchived('corrupt-size')
    await rewriteHead(a.id, h => h.set('Agentlog-JSONL-Size', String(Number(h.get('Agentlog-JSONL-Size')) + 1)))
    const err = await backend.loadStored(SessionId(a.id)).catch(e => e as Error)
    expect(err).toBeInstanceOf(AgentlogArchiveCorruptError)
    expect((err as Error).message).toContain(JSON.stringify(a.id))
    expect((err as Error).message).toContain(a.archiveId)
  })

  it('a part that names another archive id', async () => {
    const a = await importedArchived('corrupt-part')
    const nc = await backend.connection()
    const js = jetstream(nc)
    // The head now says its payload has two messages; part 1 names another archive.
    const ph = natsHeaders()
    ph.set('Agentlog-Archive-Id', 'SomeOtherArchive1')
    ph.set('Agentlog-Archive-Part', '1')
    await js.publish(archivePartSubject(token(a.id), a.archiveId, 1), new Uint8Array([0x28]), { headers: ph })
    await rewriteHead(a.id, h => h.set('Agentlog-Archive-Parts', '2'))
    const err = await backend.loadStored(SessionId(a.id)).catch(e => e as Error)
    expect(err).toBeInstanceOf(AgentlogArchiveCorruptError)
    expect((err as Error).message).toContain(JSON.stringify(a.id))
    expect((err as Error).message).toContain('SomeOtherArchive1')
    // A write refuses too (it never restores other bytes).
    const next: SessionEvent = { type: 'turn/start', seq: a.events.length, time: 1785000000999, data: { turn: 9 } } as SessionEvent
    const meta = { version: 0, id: SessionId(a.id), createdAt: 1, delegationDepth: 0 } as never
    await expect(backend.appendBatch(meta, [next], true)).rejects.toThrow(/archive does not match its head/)
  })
})

/** Import events (as one JSONL file, header line first) through the Go stack. */
async function goImport(id: string, events: readonly WireEvent[], edit: (line: string) => string = l => l): Promise<void> {
  const file = join(mkdtempSync(join(tmpdir(), 'dsh-archive-')), 'session.jsonl')
  const header = JSON.stringify({ type: 'session', version: 0, id, createdAt: 1785000000000, cwd: '/w' })
  writeFileSync(file, header + '\n' + events.map(e => edit(encodeEventLine(id, e)) + '\n').join(''))
  await agentlog('import', file, '--session', id)
}

describe('archive shapes', () => {
  it('runs of streamed chunks (packed rows in the archive) load as the events they were', async () => {
    const id = uniqueId('archive-rows')
    const events: WireEvent[] = [{ type: 'turn/start', seq: 0, time: 1785000000001, data: { turn: 1 } }]
    for (let i = 0; i < 12; i++) events.push({ type: 'assistant/chunk', seq: events.length, time: 1785000000002 + 3 * i, data: { turn: 1, step: 1, chunk: { type: 'text-delta', index: 0, text: `t${i} "q" é\n` } } })
    for (let i = 0; i < 5; i++) events.push({ type: 'assistant/chunk', seq: events.length, time: 1785000000100 + i, data: { turn: 1, step: 1, chunk: { type: 'reasoning-delta', index: 1, text: `r${i}` } } })
    for (let i = 0; i < 4; i++) events.push({ type: 'assistant/chunk', seq: events.length, time: 1785000000200 + i, data: { turn: 1, step: 1, chunk: { type: 'tool-call-delta', index: 2, id: 'c1', ...i === 0 ? { name: 'read' } : {}, argumentsDelta: `{"a":${i}` } } })
    // A run whose texts are written with escapes JSON.stringify would not write (\u003c for <):
    // the Go importer keeps those bytes, packs them, and a restore writes them back as they were.
    for (let i = 0; i < 4; i++) events.push({ type: 'assistant/chunk', seq: events.length, time: 1785000000300 + i, data: { turn: 1, step: 2, chunk: { type: 'text-delta', index: 0, text: `<b>${i}</b>` } } })
    await goImport(id, events, l => l.replaceAll('<', '\\u003c'))
    const hot = await goEvents(id)
    expect(hot.events).toEqual(events)
    expect(hot.text).toContain('\\u003cb>0')
    await goArchive(id)
    const cold = await backend.loadStored(SessionId(id))
    expect(cold!.events).toEqual(events)
    const next: WireEvent = { type: 'turn/start', seq: events.length, time: 1785000000999, data: { turn: 2 } }
    await backend.appendBatch(cold!.meta, [next as SessionEvent], true)
    const back = await goEvents(id)
    expect(back.text).toBe(hot.text + encodeEventLine(id, next) + '\n') // the restored records, byte for byte
  })

  it('an archive followed by hot records (a writer appended while it was archived) loads as one log', async () => {
    const a = await importedArchived('archive-then-hot', 3)
    // A record after the archived prefix, as a writer racing the archive's commit leaves it.
    const nc = await backend.connection()
    const js = jetstream(nc)
    const next: WireEvent = { type: 'turn/start', seq: a.events.length, time: 1785000000999, data: { turn: 77 } }
    const h = natsHeaders()
    for (const [k, v] of recordHeaders(token(a.id), next.seq, 1)) h.set(k, v)
    h.set('Nats-Expected-Last-Subject-Sequence', '0')
    await js.publish(sessionSubject(a.id, 16), encodeEventLine(a.id, next), { headers: h })
    expect(JSON.parse(await agentlog('status', a.id, '--json')).state).toBe('active')
    const stored = await backend.loadStored(SessionId(a.id))
    expect(stored!.events).toEqual([...a.events, next])
    expect((await goEvents(a.id)).events).toEqual([...a.events, next])
    // And it appends after, guarded on the hot tail (no restore: the log is whole).
    const more: WireEvent = { type: 'turn/start', seq: a.events.length + 1, time: 1785000001000, data: { turn: 78 } }
    await backend.appendBatch(stored!.meta, [more as SessionEvent], true)
    expect((await goEvents(a.id)).events).toEqual([...a.events, next, more])
    // A newer archive of the whole log is committed, its purge of the hot records not yet done (an
    // archive running now): the log reads the same, in both readers.
    const jsm = await jetstreamManager(nc)
    const old = await jsm.streams.getMessage(ARCHIVE_STREAM, { last_by_subj: archiveSubject(token(a.id)) })
    const jsonl = Buffer.from(await agentlog('events', '--packed', '--', a.id))
    const payload = zstdCompressSync(Buffer.concat([jsonl, Buffer.from('{}')]))
    const nh = natsHeaders()
    for (const k of old!.header.keys()) if (!k.startsWith('Nats-')) nh.set(k, old!.header.get(k))
    nh.set('Agentlog-Archive-Id', 'NewerArchive' + randomBytes(4).toString('hex'))
    nh.set('Agentlog-Events', String(a.events.length + 2))
    nh.set('Agentlog-JSONL-Size', String(jsonl.length))
    nh.set('Agentlog-JSONL-SHA256', createHash('sha256').update(jsonl).digest('hex'))
    nh.set('Agentlog-Archive-Parts', '1')
    nh.set('Agentlog-Payload', `${payload.length} 2`)
    await js.publish(archiveSubject(token(a.id)), payload, { headers: nh })
    expect((await backend.loadStored(SessionId(a.id)))!.events).toEqual([...a.events, next, more])
    expect((await goEvents(a.id)).events).toEqual([...a.events, next, more])
  })

  it('a large archive (several parts, an offloaded event inline) loads and resumes; Go reads it whole', async () => {
    const id = uniqueId('archive-large')
    // 3 MiB of incompressible text: its zstd payload needs several archive messages.
    const big = randomBytes(3 << 20).toString('base64')
    const events: WireEvent[] = [
      { type: 'turn/start', seq: 0, time: 1, data: { turn: 1 } },
      { type: 'x-test/blob', seq: 1, time: 2, data: { turn: 1, step: 1, text: big } },
      { type: 'turn/end', seq: 2, time: 3, data: { turn: 1, reason: { kind: 'completed' } } },
    ]
    await goImport(id, events)
    await goArchive(id)
    const nc = await backend.connection()
    const jsm = await jetstreamManager(nc)
    const head = await jsm.streams.getMessage(ARCHIVE_STREAM, { last_by_subj: archiveSubject(token(id)) })
    expect(Number(head!.header.get('Agentlog-Archive-Parts'))).toBeGreaterThan(1)
    const cold = await backend.loadStored(SessionId(id))
    expect(cold!.events).toEqual(events)
    const next: WireEvent = { type: 'turn/start', seq: 3, time: 4, data: { turn: 2 } }
    await backend.appendBatch(cold!.meta, [next as SessionEvent], true)
    expect(JSON.parse(await agentlog('status', id, '--json')).state).toBe('active')
    const go = await goEvents(id)
    expect(go.events).toEqual([...events, next])
    expect((await backend.loadStored(SessionId(id)))!.events).toEqual([...events, next])
  })
})
